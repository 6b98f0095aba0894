"""Every verb through real HTTP, in kube-scheduler's exact wire format."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from devshare.config import Configuration, with_overrides
from devshare.kube.errors import Unavailable
from devshare.kube.leader import LeaseFollower, micro_time
from devshare.kube.memory import MemoryBackend
from devshare.model.codecs import decode_allocation
from devshare.server.extender.serve import ExtenderOptions, cluster_saver
from support.cluster import usage_key
from support.extender import (
    GiB,
    Switch,
    bind,
    cluster,
    device,
    full_node_pods,
    names_body,
    nodes_body,
    pod,
    post,
    running,
    settle,
)
from support.waiting import eventually, settled


async def test_filter_node_names_splits_failed_and_unresolvable() -> None:
    backend = cluster(2, gpus=2, pods=[*full_node_pods("node-1", 2)], no_device_nodes=1)
    async with running(backend) as (client, _):
        out = await post(client, "/filter", names_body(pod("p", core=50, mem="4Gi"),
                                                       ["node-0", "node-1", "plain-0", "ghost"]))
    assert out["NodeNames"] == ["node-0"]
    assert out["Nodes"] is None
    assert out["Error"] == ""
    assert set(out["FailedNodes"]) == {"node-1"}  # full now, preemption could help
    assert out["FailedNodes"]["node-1"].endswith("no card has that much free")
    assert set(out["FailedAndUnresolvableNodes"]) == {"plain-0", "ghost"}
    assert "no gpu devices" in out["FailedAndUnresolvableNodes"]["plain-0"]
    assert "not known to devshare" in out["FailedAndUnresolvableNodes"]["ghost"]


async def test_filter_reason_is_the_same_for_every_node_in_the_same_plight() -> None:
    """kube-scheduler counts identical reasons into one line of the pod's event: the answer names
    the ask, never a node's cards (those vary by node and would make an event line per node)."""
    backend = cluster(3, gpus=2, pods=[*full_node_pods("node-0", 2), *full_node_pods("node-1", 2),
                                       *full_node_pods("node-2", 2)])
    async with running(backend) as (client, _):
        out = await post(client, "/filter", names_body(pod("p", core=60, mem="4Gi"), ["node-0", "node-1", "node-2"]))
    assert len(set(out["FailedNodes"].values())) == 1
    (reason,) = set(out["FailedNodes"].values())
    assert reason.startswith("needs one gpu with 60 percent compute") and "gpu 0" not in reason
    assert "%" not in reason  # kube-scheduler formats event messages with the reasons as the format


async def test_filter_reason_names_the_ask() -> None:
    busy = pod("busy", core=10, mem="14Gi", node_name="node-0", annotations={"devshare.io/allocation": json.dumps(
        {"node": "node-0", "containers": [{"name": "main", "devices": [
            {"type": "gpu", "minor": 0, "id": "GPU-node-0-0", "core": 10, "memory": 14 * GiB, "memoryRatio": 88}]}]})})
    backend = cluster(1, gpus=1, pods=[busy])
    async with running(backend) as (client, _):
        out = await post(client, "/filter", names_body(pod("p", core=10, mem="6Gi"), ["node-0"]))
    assert out["NodeNames"] == []
    assert out["FailedNodes"]["node-0"] == "needs one gpu with 10 percent compute and 6 GiB: no card has that much free"


async def test_filter_full_node_list_answers_nodes() -> None:
    backend = cluster(2, gpus=2, pods=full_node_pods("node-1", 2))
    async with running(backend) as (client, _):
        out = await post(client, "/filter", nodes_body(pod("p", core=50, mem="4Gi"), ["node-0", "node-1"]))
    assert out["NodeNames"] is None
    assert out["Nodes"]["kind"] == "NodeList"
    assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["node-0"]
    assert set(out["FailedNodes"]) == {"node-1"}


async def test_filter_accepts_camel_case_and_pod_without_devices_passes_every_known_node() -> None:
    """A pod asking for no device is judged by its node's CPU and memory alone: every node devshare knows
    takes it here, with or without devices; a node it does not know is refused, as for any pod."""
    backend = cluster(1, gpus=1, no_device_nodes=1)
    async with running(backend) as (client, _):
        out = await post(client, "/filter", {"pod": pod("p", core=50), "nodes": None, "nodeNames": ["node-0"]})
        assert out["NodeNames"] == ["node-0"]
        plain = pod("cpu-only")
        out = await post(client, "/filter", names_body(plain, ["node-0", "plain-0", "ghost"]))
        assert out["NodeNames"] == ["node-0", "plain-0"]
        assert list(out["FailedAndUnresolvableNodes"]) == ["ghost"]


async def test_filter_invalid_request_is_unresolvable_everywhere() -> None:
    backend = cluster(2, gpus=1)
    bad = pod("bad", core=250)  # more than one card's compute as a share
    async with running(backend) as (client, _):
        out = await post(client, "/filter", names_body(bad, ["node-0", "node-1"]))
    assert out["NodeNames"] == []
    assert set(out["FailedAndUnresolvableNodes"]) == {"node-0", "node-1"}
    assert out["FailedAndUnresolvableNodes"]["node-0"].startswith("invalid request:")


async def test_prioritize_scores_0_to_10_and_prefers_the_fuller_node() -> None:
    half = pod("half", core=50, mem="8Gi", node_name="node-1", annotations={"devshare.io/allocation": json.dumps(
        {"node": "node-1", "containers": [{"name": "main", "devices": [
            {"type": "gpu", "minor": 0, "id": "GPU-node-1-0", "core": 50, "memory": 8 * GiB, "memoryRatio": 50}]}]})})
    backend = cluster(3, gpus=2, pods=[half, *full_node_pods("node-2", 2)])
    async with running(backend) as (client, _):
        ask = pod("p", core=50, mem="8Gi")
        out = await post(client, "/prioritize", names_body(ask, ["node-0", "node-1", "node-2"]))
        full = await post(client, "/prioritize", nodes_body(pod("p", core=50, mem="8Gi"), ["node-0", "node-1"]))
    assert [set(h) for h in out] == [{"Host", "Score"}] * 3
    scores = {h["Host"]: h["Score"] for h in out}
    assert all(0 <= s <= 10 for s in scores.values())
    assert scores["node-1"] == 10 and scores["node-1"] > scores["node-0"]  # binpack
    assert scores["node-2"] == 0  # does not fit
    assert [h["Host"] for h in full] == ["node-0", "node-1"]


async def test_bind_annotates_binds_and_records() -> None:
    backend = cluster(1, gpus=2, pods=[pod("p", core=50, mem="4Gi")])
    async with running(backend) as (client, runtime):
        assert await bind(client, "p", "node-0") == ""
        stored = await backend.get_pod("default", "p")
        assert stored is not None
        assert stored["spec"]["nodeName"] == "node-0"
        ann = stored["metadata"]["annotations"]
        alloc = decode_allocation(ann)
        assert alloc is not None and alloc.node == "node-0"
        assert "scheduling.koordinator.sh/device-allocated" in ann
        rec = runtime.state.pods["default/p"]
        assert rec.phase == "bound" and rec.allocation == alloc
        await settle(runtime, backend)
        inspect = await (await client.get("/inspect")).json()
        used = [d for n in inspect["nodes"] for d in n["devices"] if d["pods"]]
        assert [d["pods"] for d in used] == [["default/p/main"]]
        assert used[0]["used"]["core"] == 50 and used[0]["used"]["memory"] == 4 * GiB
        # a second bind of the same pod is refused: it is bound already
        assert "already bound" in await bind(client, "p", "node-0")


async def test_bind_aliyun_pod_writes_its_dialect() -> None:
    p = pod("a", mem=None)
    p["spec"]["containers"][0]["resources"]["limits"] = {"aliyun.com/gpu-mem": "4096"}
    backend = cluster(1, gpus=2, pods=[p])
    async with running(backend) as (client, _):
        assert await bind(client, "a", "node-0") == ""
    stored = await backend.get_pod("default", "a")
    assert stored is not None
    ann = stored["metadata"]["annotations"]
    assert ann["ALIYUN_COM_GPU_MEM_ASSIGNED"] == "false"
    assert ann["ALIYUN_COM_GPU_MEM_DEV"] == "16384"


async def test_bind_refusals_say_why() -> None:
    backend = cluster(1, gpus=1, pods=[pod("big", gpus=2), pod("p", core=50)])
    async with running(backend) as (client, runtime):
        assert await bind(client, "nope", "node-0") == "pod default/nope not found"
        assert "does not fit on node node-0" in await bind(client, "big", "node-0")
        assert "not known to devshare" in await bind(client, "p", "ghost")
        assert "deleted and re-created" in await bind(client, "p", "node-0", uid="other-uid")
        assert runtime.state.pods == {}
        metrics = await (await client.get("/metrics")).text()
    assert 'devshare_extender_requests_total{result="error",verb="bind"} 4.0' in metrics
    assert 'devshare_extender_failures_total{reason="pod-not-found",verb="bind"} 1.0' in metrics


async def test_bind_failure_undoes_the_reservation_and_annotations() -> None:
    inner = cluster(1, gpus=1, pods=[pod("p", core=100)])

    class FailingBind(MemoryBackend):
        async def bind_pod(self, namespace: str, name: str, node: str, *, uid: str | None = None,
                           **kw: Any) -> None:
            raise Unavailable("connection refused")

    backend = FailingBind(inner.store)
    async with running(backend) as (client, runtime):
        error = await bind(client, "p", "node-0")
        assert error.startswith("binding pod default/p to node node-0 failed: connection refused")
        assert runtime.state.pods == {}
        stored = await backend.get_pod("default", "p")
        # no allocation written; the only mark is the one that makes a late Binding fail (its claim given back)
        assert stored is not None and set(stored["metadata"].get("annotations") or {}) == {"devshare.io/claim-expired"}
        assert runtime.claims is not None and runtime.claims.current is not None
        assert not runtime.claims.current.claims
        # the devices are free again: the pod filters fine
        out = await post(client, "/filter", names_body(pod("q", core=100), ["node-0"]))
        assert out["NodeNames"] == ["node-0"]


async def test_follower_filters_but_does_not_bind() -> None:
    backend = cluster(1, gpus=1, pods=[pod("p", core=50)])
    async with running(backend, leadership=Switch(leading=False)) as (client, _):
        out = await post(client, "/filter", names_body(pod("p", core=50), ["node-0"]))
        assert out["NodeNames"] == ["node-0"]
        assert await bind(client, "p", "node-0") == "not the leader"


async def test_a_follower_binds_as_soon_as_its_kube_scheduler_holds_the_lease() -> None:
    """kube-scheduler binds right after it takes its Lease; its extender read the Lease up to a follow
    period before, when nobody held it: the bind reads it again rather than being refused."""
    backend = cluster(1, gpus=1, pods=[pod("p", core=50)])
    options = ExtenderOptions(follow_lease="devshare-scheduler", pod_name="sched-0", follow_period=3600)
    async with running(backend, options) as (client, runtime):
        follower = runtime.elector
        assert isinstance(follower, LeaseFollower)
        while follower.reads < 1:  # its one read: no Lease yet
            await asyncio.sleep(0.01)
        assert not runtime.extender.leadership.may_write()
        await backend.create_lease("devshare-system", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "devshare-scheduler", "namespace": "devshare-system"},
            "spec": {"holderIdentity": "sched-0_5f1c", "leaseDurationSeconds": 15, "renewTime": micro_time()}})
        assert await bind(client, "p", "node-0") == ""
        assert follower.is_leader


async def test_leader_election_lets_the_leader_bind() -> None:
    backend = cluster(1, gpus=1, pods=[pod("p", core=50)])
    async with running(backend, ExtenderOptions(leader_election=True, identity="me")) as (client, runtime):
        assert runtime.elector is not None
        await settled(runtime.elector.leading.wait())
        assert await bind(client, "p", "node-0") == ""


async def test_not_ready_until_synced() -> None:
    release = asyncio.Event()

    class SlowList(MemoryBackend):
        async def list(self, kind: Any) -> Any:
            await release.wait()
            return await super().list(kind)

    backend = SlowList(cluster(1, gpus=1, pods=[pod("p", core=50)]).store)
    async with running(backend, wait_synced=False) as (client, runtime):
        assert (await client.get("/readyz")).status == 503
        assert (await client.get("/healthz")).status == 200
        out = await post(client, "/filter", names_body(pod("p", core=50), ["node-0"]))
        assert out["Error"] == "not ready: state not synced"
        assert (await post(client, "/prioritize", names_body(pod("p", core=50), ["node-0"]), 503))["error"]
        assert await bind(client, "p", "node-0") == "not ready: state not synced"
        release.set()
        await settled(runtime.informer.synced.wait())
        assert (await client.get("/readyz")).status == 200
        out = await post(client, "/filter", names_body(pod("p", core=50), ["node-0"]))
        assert out["NodeNames"] == ["node-0"] and out["Error"] == ""


MALFORMED = [
    (b"", "empty body"),
    (b"{not json", "not valid JSON"),
    (b"0\x00", "not valid JSON"),
    (b"[1, 2]", "got a JSON array"),
    (b'"Pod"', "got a JSON string"),
    (b'{"Nodes": null, "NodeNames": ["a"]}', "missing required field `Pod`"),
    (b'{"Pod": null, "NodeNames": ["a"]}', "at `$.Pod`"),
    (b'{"Pod": [], "NodeNames": ["a"]}', "at `$.Pod`"),
    (b'{"Pod": {}, "NodeNames": "node-0"}', "at `$.NodeNames`"),
    (b'{"Pod": {}, "NodeNames": [1]}', "at `$.NodeNames[0]`"),
    (b'{"Pod": {}, "Nodes": null, "NodeNames": null}', "neither NodeNames nor Nodes"),
    (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', "Nodes.items[0] has no metadata.name"),
    (b'{"Pod": {}, "Nodes": {"items": 3}}', "Nodes.items must be a list"),
    (b'{"pod": {}, "NodeNames": [], "nodenames": []}', "given twice"),
    (b'{"Pod": {"metadata": {"name": "\x80"}}, "NodeNames": ["a"]}', "not valid UTF-8"),
    (b'{"Pod": {}, "NodeNames": ["\xff"]}', "not valid UTF-8"),
]


@pytest.mark.parametrize("verb", ["/filter", "/prioritize"])
@pytest.mark.parametrize(("body", "message"), MALFORMED)
async def test_malformed_filter_bodies_get_400(verb: str, body: bytes, message: str) -> None:
    backend = cluster(1, gpus=1)
    async with running(backend) as (client, _):
        out = await post(client, verb, body, 400)
    assert message in out["error"], out
    assert out["error"].startswith(verb[1:] + ": ")


@pytest.mark.parametrize(("verb", "body", "message"), [
    ("/bind", b'{"PodName": "p", "PodNamespace": "default"}', "missing required field `Node`"),
    ("/bind", b'{"PodName": 3, "PodNamespace": "default", "Node": "n"}', "at `$.PodName`"),
    ("/bind", b"garbage", "not valid JSON"),
    ("/bind", b'{"PodName": "\xc3", "PodNamespace": "default", "Node": "n"}', "UTF-8"),
    ("/preempt", b'{"NodeNameToMetaVictims": {}}', "missing required field `Pod`"),
    ("/preempt", b'{"Pod": {}, "NodeNameToMetaVictims": {"n": {"Pods": [{"UID": 1}]}}}',
     "at `$.NodeNameToMetaVictims[...].Pods[0].UID`"),
    ("/preempt", b'{"Pod": {}, "NodeNameToVictims": {"n": {"Pods": 1}}}', "at `$.NodeNameToVictims[...].Pods`"),
])
async def test_malformed_bind_and_preempt_bodies_get_400(verb: str, body: bytes, message: str) -> None:
    backend = cluster(1, gpus=1)
    async with running(backend) as (client, _):
        out = await post(client, verb, body, 400)
        metrics = await (await client.get("/metrics")).text()
    assert message in out["error"], out
    assert f'devshare_extender_requests_total{{result="malformed",verb="{verb[1:]}"}} 1.0' in metrics


async def test_preempt_meta_victims_keeps_only_the_needed_lowest_priority() -> None:
    busy = [*full_node_pods("node-0", 2, priority=5, prefix="low")]
    busy[1]["spec"]["priority"] = 100  # GPU 1 is held by a more important pod
    backend = cluster(2, gpus=2, pods=[*busy, *full_node_pods("node-1", 2, priority=1, prefix="x")])
    preemptor = pod("vip", gpus=1, priority=1000)
    uid = {p["metadata"]["name"]: p["metadata"]["uid"] for p in busy}
    body = {"Pod": preemptor, "NodeNameToMetaVictims": {
        "node-0": {"Pods": [{"UID": uid["low-node-0-1"]}, {"UID": uid["low-node-0-0"]}, {"UID": "no-devices"}],
                   "NumPDBViolations": 1},
        "node-1": {"Pods": [], "NumPDBViolations": 0},  # no victim offered: nothing frees a GPU
    }}
    async with running(backend) as (client, runtime):
        before = usage_key(runtime.state)
        out = await post(client, "/preempt", body)
        assert usage_key(runtime.state) == before  # the simulation left the state as it was
        assert all(r.phase == "bound" for r in runtime.state.pods.values())
    assert out == {"NodeNameToMetaVictims": {"node-0": {
        "Pods": [{"UID": uid["low-node-0-0"]}, {"UID": "no-devices"}], "NumPDBViolations": 1}}}


async def test_preempt_full_victims_and_nodes_where_nothing_helps() -> None:
    busy = full_node_pods("node-0", 2, priority=0)
    backend = cluster(1, gpus=2, pods=busy)
    async with running(backend) as (client, _):
        two = await post(client, "/preempt", {"Pod": pod("two", gpus=2), "NodeNameToVictims": {
            "node-0": {"Pods": busy, "NumPDBViolations": 0}}})
        three = await post(client, "/preempt", {"Pod": pod("three", gpus=3), "NodeNameToVictims": {
            "node-0": {"Pods": busy, "NumPDBViolations": 0}}})
    assert sorted(v["UID"] for v in two["NodeNameToMetaVictims"]["node-0"]["Pods"]) == sorted(
        p["metadata"]["uid"] for p in busy)
    assert three == {"NodeNameToMetaVictims": {}}


async def test_filter_failures_are_counted_by_the_engines_reason_not_the_events_brief() -> None:
    """The event's brief text ("no card has that much free") says nothing of why; the metric's class
    comes from the engine's reason of each node."""
    busy = [*full_node_pods("node-0", 2), pod("half", core=50, mem="4Gi", node_name="node-1", annotations={
        "devshare.io/allocation": json.dumps({"node": "node-1", "containers": [{"name": "main", "devices": [
            {"type": "gpu", "minor": m, "id": f"GPU-node-1-{m}", "core": 50, "memory": 4 * 2**30}
            for m in (0, 1)]}]})})]
    async with running(cluster(2, gpus=2, pods=busy)) as (client, _):
        out = await post(client, "/filter", names_body(pod("p", gpus=1), ["node-0"]))
        assert out["FailedNodes"] == {"node-0": "needs a whole gpu: no card has that much free"}
        await post(client, "/filter", names_body(pod("q", core=60, mem="1Gi"), ["node-0", "node-1"]))
        await post(client, "/filter", names_body(pod("r", core=10, mem="20Gi"), ["node-1"]))
        text = await (await client.get("/metrics")).text()
    assert 'devshare_extender_failures_total{reason="device-in-use",verb="filter"} 1.0' in text
    assert 'devshare_extender_failures_total{reason="compute",verb="filter"} 2.0' in text
    assert 'devshare_extender_failures_total{reason="device-size",verb="filter"} 1.0' in text
    assert 'reason="other",verb="filter"' not in text


async def test_metrics_and_inspect() -> None:
    backend = cluster(1, gpus=2, pods=[pod("p", core=50, mem="4Gi")])
    async with running(backend) as (client, runtime):
        await post(client, "/filter", names_body(pod("p", core=50, mem="4Gi"), ["node-0", "ghost"]))
        assert await bind(client, "p", "node-0") == ""
        text = await (await client.get("/metrics")).text()
        inspect = await (await client.get("/inspect")).json()
        assert inspect == json.loads(json.dumps(runtime.state.inspect()))
    assert 'devshare_extender_requests_total{result="ok",verb="filter"} 1.0' in text
    assert 'devshare_extender_failures_total{reason="unknown-node",verb="filter"} 1.0' in text
    assert 'devshare_extender_request_seconds_count{verb="bind"} 1.0' in text
    assert 'devshare_device_allocated_ratio{minor="1",node="node-0",resource="core",type="gpu"} 0.5' in text or \
        'devshare_device_allocated_ratio{minor="0",node="node-0",resource="core",type="gpu"} 0.5' in text
    assert 'devshare_extender_pods{phase="bound"} 1.0' in text
    assert "devshare_extender_synced 1.0" in text
    assert [n["name"] for n in inspect["nodes"]] == ["node-0"]
    dev = inspect["nodes"][0]["devices"][0]
    assert set(dev) >= {"type", "minor", "id", "health", "total", "used", "pods"}


async def test_expiry_drops_a_reservation_whose_bind_never_completed() -> None:
    backend = cluster(1, gpus=1, pods=[pod("p", core=100)])
    now = [0.0]
    config = with_overrides(Configuration(), assume_ttl=30)
    async with running(backend, ExtenderOptions(config=config), clock=lambda: now[0]) as (client, runtime):
        ext = runtime.extender
        gate = asyncio.Event()
        real_bind = backend.bind_pod

        async def hung_bind(namespace: str, name: str, node_name: str, *, uid: str | None = None,
                        **kw: Any) -> None:
            await gate.wait()
            await real_bind(namespace, name, node_name, uid=uid, **kw)

        backend.bind_pod = hung_bind  # type: ignore[method-assign]
        task = asyncio.create_task(bind(client, "p", "node-0"))
        await eventually(lambda: "default/p" in runtime.state.pods)
        assert runtime.state.pods["default/p"].phase == "assumed"
        now[0] = 100.0
        assert ext.expire() == []  # a bind in flight keeps its reservation
        gate.set()
        assert await task == ""
        assert runtime.state.pods["default/p"].phase == "bound"
        # a reservation left behind without a bind in flight expires after the TTL
        q = runtime.state.pods["default/p"].pod
        ext.lifecycle.release("default/p")
        alloc = ext.lifecycle.scheduler.allocate_on(q, "node-0")
        assert not isinstance(alloc, str)
        ext.lifecycle.assume(q, alloc, now=now[0], ttl=30)
        now[0] = 129.0
        assert ext.expire() == []
        now[0] = 130.0
        assert ext.expire() == ["default/p"]
        assert runtime.state.pods == {}


async def test_save_after_bind(tmp_path: Path) -> None:
    backend = cluster(1, gpus=1, pods=[pod("p", core=50)])
    out = tmp_path / "out.yaml"
    saver = cluster_saver(backend, out)
    async with running(backend, ExtenderOptions(save=saver)) as (client, _):
        assert await bind(client, "p", "node-0") == ""
        await saver.idle()  # written shortly after the bind, off the event loop
        saved = [d for d in yaml.safe_load_all(out.read_text()) if d]
    p = next(d for d in saved if d["kind"] == "Pod")
    assert p["spec"]["nodeName"] == "node-0"
    assert "devshare.io/allocation" in p["metadata"]["annotations"]
    # the saved file is a valid cluster: a new extender rebuilds the same usage from it
    again = MemoryBackend.load(out)
    async with running(again) as (_, runtime):
        assert list(runtime.state.pods) == ["default/p"]


def test_device_helper_is_valid() -> None:
    assert device("n", 2)["spec"]["devices"][1]["minor"] == 1


async def test_prioritize_after_filter_reuses_equal_scores() -> None:
    from devshare.server.extender.nodeset import resolve
    from devshare.server.extender.verdicts import score_nodes

    half = pod("half", core=50, mem="8Gi", node_name="node-1", annotations={"devshare.io/allocation": json.dumps(
        {"node": "node-1", "containers": [{"name": "main", "devices": [
            {"type": "gpu", "minor": 0, "id": "GPU-node-1-0", "core": 50, "memory": 8 * GiB, "memoryRatio": 50}]}]})})
    backend = cluster(3, gpus=2, pods=[half])
    ask = pod("p", core=25, mem="2Gi", resource_version="7")
    async with running(backend) as (client, runtime):
        out = await post(client, "/filter", names_body(ask, ["node-0", "node-1", "node-2"]))
        assert "default/p" in runtime.extender.filtering.filtered  # kept for the prioritize that follows
        reused = await post(client, "/prioritize", names_body(ask, out["NodeNames"]))
        ext = runtime.extender
        fresh = score_nodes(ext.lifecycle.scheduler, ext.requests.parse(ask),
                            resolve(runtime.state, out["NodeNames"])).tolist()
    assert [h["Score"] for h in reused] == fresh
    assert max(fresh) == 10 and min(fresh) == 0


async def test_prioritize_over_some_of_the_filtered_nodes_reuses_and_rescales() -> None:
    """kube-scheduler's own filters may drop nodes the extender passed: prioritize over the rest is
    answered from the filter's scores, 0..10 over the nodes asked, equal to a fresh evaluation."""
    from devshare.server.extender.nodeset import resolve
    from devshare.server.extender.verdicts import score_nodes

    busy = [pod(f"b{i}", core=25 * (i + 1), mem="2Gi", node_name=f"node-{i}", annotations={
        "devshare.io/allocation": json.dumps({"node": f"node-{i}", "containers": [{"name": "main", "devices": [
            {"type": "gpu", "minor": 0, "id": f"GPU-node-{i}-0", "core": 25 * (i + 1), "memory": 2 * GiB,
             "memoryRatio": 25 * (i + 1)}]}]})}) for i in range(3)]
    backend = cluster(4, gpus=2, pods=busy)
    ask = pod("p", core=20, mem="2Gi", resource_version="9")
    async with running(backend) as (client, runtime):
        out = await post(client, "/filter", names_body(ask, ["node-0", "node-1", "node-2", "node-3"]))
        assert len(out["NodeNames"]) == 4
        ext = runtime.extender
        calls = []
        real = ext.lifecycle.scheduler.evaluate
        ext.lifecycle.scheduler.evaluate = lambda *a, **k: calls.append(1) or real(*a, **k)  # type: ignore[method-assign]
        some = ["node-3", "node-1", "node-0"]
        reused = await post(client, "/prioritize", names_body(ask, some))
        assert calls == []  # answered from the filter
        assert [h["Host"] for h in reused] == some
        ext.lifecycle.scheduler.evaluate = real  # type: ignore[method-assign]
        fresh = score_nodes(ext.lifecycle.scheduler, ext.requests.parse(ask), resolve(runtime.state, some)).tolist()
        assert [h["Score"] for h in reused] == fresh
        assert max(fresh) == 10 and min(fresh) == 0
        # a node the filter did not pass (or did not see) means a fresh evaluation
        await post(client, "/prioritize", names_body(ask, ["node-0", "node-9"]))


async def test_policy_option_binpack_spread_and_devshare_by_default() -> None:
    half = pod("half", core=50, mem="8Gi", node_name="node-1", annotations={"devshare.io/allocation": json.dumps(
        {"node": "node-1", "containers": [{"name": "main", "devices": [
            {"type": "gpu", "minor": 0, "id": "GPU-node-1-0", "core": 50, "memory": 8 * GiB, "memoryRatio": 50}]}]})})
    ask = pod("p", core=50, mem="8Gi")
    best = {}
    for policy in ("binpack", "spread"):
        async with running(cluster(2, gpus=2, pods=[half]), ExtenderOptions(
                config=with_overrides(Configuration(), policy=policy))) as (client, _):
            out = await post(client, "/prioritize", names_body(ask, ["node-0", "node-1"]))
        scores = {h["Host"]: h["Score"] for h in out}
        best[policy] = max(scores, key=lambda n: scores[n])
        assert sorted(scores.values()) == [0, 10]
    assert best == {"binpack": "node-1", "spread": "node-0"}
    async with running(cluster(2, gpus=2, pods=[half])) as (client, runtime):
        assert runtime.extender.lifecycle.scheduler.policy.name == "devshare"
        seen = runtime.extender.lifecycle.scheduler.policy.seen
        await post(client, "/filter", names_body(ask, ["node-0", "node-1"]))
        await post(client, "/filter", names_body(ask, ["node-0", "node-1"]))
        assert runtime.extender.lifecycle.scheduler.policy.seen == seen + 1  # each pod is observed once
