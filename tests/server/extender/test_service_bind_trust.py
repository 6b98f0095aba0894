"""Bind trusts no caller: it decides from the pod as the API server has it, and refuses pods and
nodes that are not devshare's."""

from __future__ import annotations

from devshare.model.codecs import decode_allocation
from support.extender import bind, cluster, names_body, pod, post, running


async def test_a_forged_filter_body_does_not_change_what_bind_writes() -> None:
    real = pod("p", core=60, mem="10Gi", resource_version="7")
    backend = cluster(1, gpus=1, pods=[real])
    async with running(backend) as (client, _):
        stored = backend.store.get("pods", "default/p")
        forged = pod("p", core=5, mem="1Gi", uid=stored["metadata"]["uid"],
                     resource_version=stored["metadata"]["resourceVersion"])
        out = await post(client, "/filter", names_body(forged, ["node-0"]))
        assert out["NodeNames"] == ["node-0"]
        assert await bind(client, "p", "node-0", uid=stored["metadata"]["uid"]) == ""
        written = backend.store.get("pods", "default/p")
        alloc = decode_allocation(written["metadata"]["annotations"])
        assert alloc is not None
        (grant,) = [g for _, g in alloc.grants()]
        assert grant.core_milli == 600 and grant.memory == 10 * 2**30  # the real ask, not the forged one


async def test_bind_refuses_a_pod_asking_for_no_device_of_another_scheduler() -> None:
    plain = pod("plain")
    backend = cluster(1, gpus=1, pods=[plain])
    async with running(backend) as (client, _):
        error = await bind(client, "plain", "node-0")
        assert "asks for no device devshare manages and is default-scheduler's" in error
        assert not backend.store.get("pods", "default/plain")["spec"].get("nodeName")


async def test_a_pod_asking_for_no_device_of_devshares_profile_is_placed_and_bound() -> None:
    """kube-scheduler asks about every pod of devshare's profile (deploy/scheduler): one asking for no
    device is placed by its CPU and memory, bound, and counted on its node."""
    plain = pod("plain")
    plain["spec"]["schedulerName"] = "devshare-scheduler"
    plain["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "3"}}
    backend = cluster(2, gpus=1, pods=[plain])
    for name, cpu in (("node-0", "2"), ("node-1", "4")):
        backend.store.patch("nodes", name, {"status": {"allocatable": {"cpu": cpu, "memory": "8Gi"}}})
    async with running(backend) as (client, runtime):
        out = await post(client, "/filter", names_body(plain, ["node-0", "node-1"]))
        assert out["NodeNames"] == ["node-1"] and "node-0" in out["FailedNodes"]
        assert await bind(client, "plain", "node-1") == ""
        assert backend.store.get("pods", "default/plain")["spec"]["nodeName"] == "node-1"
        row = runtime.state.row_of["node-1"]
        assert int(runtime.state.cpu_used[row]) == 3000


async def test_bind_refuses_a_node_devshare_does_not_know() -> None:
    backend = cluster(1, gpus=1, pods=[pod("p", core=50)])
    async with running(backend) as (client, _):
        error = await bind(client, "p", "no-such-node")
        assert error.startswith("node no-such-node is not known to devshare")
        assert not backend.store.get("pods", "default/p")["spec"].get("nodeName")
