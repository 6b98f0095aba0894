"""A verb's pod and candidates (server/extender/requests.py): the caches keyed by request bodies stay
within their budgets, and the configuration's device types and refusals apply to the pods read."""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from devshare.config import API_VERSION, KIND, parse_config
from devshare.kube.memory import MemoryBackend
from devshare.model.device import DeviceInfo, NodeDevices, device_object
from devshare.server.extender.extender import Extender
from devshare.server.extender.nodeset import NodeSets
from devshare.server.extender.serve import ExtenderOptions
from devshare.server.extender.wire import ExtenderArgs
from support.extender import bind, cluster, names_body, node, pod, post, running, settle
from support.kube import following

MiB = 2**20


async def synced_extender(nodes: int = 4) -> Extender:
    backend = cluster(nodes, gpus=2)
    async with following(backend) as f:
        return Extender(f.lifecycle, backend, f.cluster)


async def retained_after(fn: Callable[[int], Awaitable[None]], count: int) -> int:
    """Bytes still allocated after ``count`` calls of ``fn(i)`` (whatever the calls kept alive)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(count):
            await fn(i)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


async def test_many_distinct_large_pods_keep_memory_bounded() -> None:
    ext = await synced_extender()
    names = msgspec.json.encode(["node-0", "node-1"])
    filler = "x" * MiB

    async def filter_one(i: int) -> None:
        p = pod(f"big-{i}", core=50, resource_version="1")
        p["metadata"]["annotations"] = {"filler": filler + str(i)}  # distinct 1 MiB bodies
        args = ExtenderArgs(pod=msgspec.Raw(msgspec.json.encode(p)), node_names=msgspec.Raw(names))
        assert (await ext.filtering.filter(args)).error == ""

    kept = await retained_after(filter_one, 60)  # 60 MiB of bodies, beyond the 32 MiB budget
    assert kept < 40 * MiB, f"{kept / MiB:.0f} MiB retained"


async def test_many_distinct_invalid_pods_with_huge_values_keep_memory_bounded() -> None:
    """An invalid request's message quotes the value: it must not keep megabytes per pod."""
    ext = await synced_extender()
    names = msgspec.json.encode(["node-0"])

    async def filter_one(i: int) -> None:
        p = pod(f"bad-{i}", resource_version="1")
        p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "9" * MiB + f"x{i}"}}
        args = ExtenderArgs(pod=msgspec.Raw(msgspec.json.encode(p)), node_names=msgspec.Raw(names))
        reason = (await ext.filtering.filter(args)).failed_and_unresolvable_nodes["node-0"]
        assert "invalid request" in reason and len(reason) < 4096, len(reason)

    kept = await retained_after(filter_one, 60)
    assert kept < 40 * MiB, f"{kept / MiB:.0f} MiB retained"


async def test_many_distinct_long_node_name_lists_keep_memory_bounded() -> None:
    """16 lists of 20,000 names (the cache's entry limit) against a budget of 8 MiB (64 in production)."""
    ext = await synced_extender()
    ext.requests.nodesets = NodeSets(ext.state, budget=8 * MiB)
    body = msgspec.json.encode(pod("p", core=50, resource_version="1"))
    lists = [msgspec.json.encode(["node-0", "node-1", *(f"gone-{i}-{j:06d}" for j in range(20_000))])
             for i in range(16)]

    async def filter_one(i: int) -> None:
        args = ExtenderArgs(pod=msgspec.Raw(body), node_names=msgspec.Raw(lists[i]))
        out = await ext.filtering.filter(args)
        assert out.error == "" and len(out.failed_and_unresolvable_nodes) == 20_000

    kept = await retained_after(filter_one, 16)
    assert kept < 12 * MiB, f"{kept / MiB:.0f} MiB retained"
    assert ext.requests.nodesets.bytes <= 8 * MiB


async def test_many_distinct_pods_with_huge_names_keep_memory_bounded() -> None:
    """The pods the policy was told of are remembered by a fixed-size digest, not by their names."""
    ext = await synced_extender()
    names = msgspec.json.encode(["node-0", "node-1"])
    long = "n" * MiB

    async def filter_one(i: int) -> None:
        p = pod(f"{long}-{i}", core=50, resource_version="1")
        args = ExtenderArgs(pod=msgspec.Raw(msgspec.json.encode(p)), node_names=msgspec.Raw(names))
        await ext.filtering.filter(args)

    kept = await retained_after(filter_one, 60)
    assert kept < 40 * MiB, f"{kept / MiB:.0f} MiB retained"


NPU = "koordinator.sh/npu"


def npu_cluster(*pods: dict[str, Any]) -> MemoryBackend:
    objs: list[dict[str, Any]] = []
    for i in range(2):
        objs += [node(f"n{i}"), device_object(NodeDevices(node=f"n{i}", devices=(
            DeviceInfo(type="gpu", minor=0, id=f"GPU-n{i}", memory=2**34),
            DeviceInfo(type="npu", minor=0, id=f"NPU-n{i}-0"), DeviceInfo(type="npu", minor=1, id=f"NPU-n{i}-1"))))]
    return MemoryBackend.from_objects([*objs, *pods])


def npu_pod(name: str, share: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": "default", "uid": f"uid-default-{name}"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {NPU: share}}}]}}


CONFIG = parse_config({"apiVersion": API_VERSION, "kind": KIND, "deviceTypes": {"npu": {"resources": [NPU]}},
                       "scheduling": {"nodePolicy": "binpack"}})


async def test_a_configured_type_is_placed_and_reserved() -> None:
    backend = npu_cluster(npu_pod("a", "60"), npu_pod("b", "60"), npu_pod("c", "200"))
    async with running(backend, ExtenderOptions(config=CONFIG)) as (client, runtime):
        out = await post(client, "/filter", names_body(npu_pod("a", "60"), ["n0", "n1"]))
        assert out["NodeNames"] == ["n0", "n1"] and not out["FailedNodes"]
        assert await bind(client, "a", "n0") == ""
        assert await bind(client, "b", "n0") == ""  # 60% + 60% do not share an npu: b takes the other one
        ann = (await backend.get_pod("default", "b"))["metadata"]["annotations"]  # type: ignore[index]
        devices = json.loads(ann["devshare.io/allocation"])["containers"][0]["devices"]
        assert [(d["type"], d["minor"], d["share"]) for d in devices] == [("npu", 1, 60)]
        assert json.loads(ann["scheduling.koordinator.sh/device-allocated"]) == {
            "npu": [{"minor": 1, "id": "NPU-n0-1", "resources": {NPU: "60"}}]}
        await settle(runtime, backend)
        used = {(n["name"], d["minor"]): d["used"]["core"] for n in runtime.state.inspect()["nodes"]
                for d in n["devices"] if d["type"] == "npu"}
        assert used == {("n0", 0): 60, ("n0", 1): 60, ("n1", 0): 0, ("n1", 1): 0}
        # two whole npus: only n1 has them free, and n0's reason says why
        out = await post(client, "/filter", names_body(npu_pod("c", "200"), ["n0", "n1"]))
        assert out["NodeNames"] == ["n1"]
        assert out["FailedNodes"]["n0"].startswith("needs 2 whole npu")


async def test_an_unconfigured_type_is_refused_with_the_fix() -> None:
    backend = npu_cluster(npu_pod("a", "50"))
    async with running(backend) as (client, _):
        out = await post(client, "/filter", names_body(npu_pod("a", "50"), ["n0", "n1"]))
        assert out["NodeNames"] == []
        reason = out["FailedAndUnresolvableNodes"]["n0"]
        assert f"asks for {NPU}, which no dialect of devshare reads: nodes list npu devices" in reason
        assert f"deviceTypes: {{npu: {{resources: [{NPU}]}}}}" in reason
        refused = await bind(client, "a", "n0")  # nor binds it, for the same reason
        assert refused.startswith("invalid request") and "which no dialect of devshare reads" in refused
