"""GPU preemption driven by the extender (kube-scheduler's own preemption cannot see devices)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from support.extender import cluster, full_node_pods, names_body, pod, post, running, settle


async def until(check: Callable[[], bool]) -> None:
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached")


async def test_high_priority_pod_evicts_the_cheapest_lower_priority_victims() -> None:
    # node-0: one card held by a priority-10 pod; node-1: one card held by a priority-100 pod
    backend = cluster(2, gpus=1, pods=[*full_node_pods("node-0", 1, priority=10, prefix="low"),
                                       *full_node_pods("node-1", 1, priority=100, prefix="mid")])
    async with running(backend) as (client, runtime):
        vip = pod("vip", gpus=1, priority=1000)
        out = await post(client, "/filter", names_body(vip, ["node-0", "node-1"]))
        assert out["NodeNames"] == []
        nom = runtime.extender.preemptor.nominations["default/vip"]
        assert (nom.node, nom.victims) == ("node-0", ["default/low-node-0-0"])
        await until(lambda: backend.store.get("pods", "default/low-node-0-0") is None)
        assert backend.store.get("pods", "default/mid-node-1-0") is not None  # the pricier victim stays
        await settle(runtime, backend)
        assert "default/low-node-0-0" not in runtime.state.pods

        # the freed card waits for the preemptor: a lower-priority pod does not get it
        other = pod("other", gpus=1, priority=5)
        out = await post(client, "/filter", names_body(other, ["node-0", "node-1"]))
        assert out["NodeNames"] == []
        assert "preemption for pod default/vip" in out["FailedNodes"]["node-0"]
        assert "default/other" not in runtime.extender.preemptor.nominations  # nothing lower to evict
        out = await post(client, "/filter", names_body(vip, ["node-0", "node-1"]))
        assert out["NodeNames"] == ["node-0"]


async def test_no_preemption_for_never_policy_or_equal_priority() -> None:
    backend = cluster(1, gpus=1, pods=full_node_pods("node-0", 1, priority=100))
    async with running(backend) as (client, runtime):
        never: dict[str, Any] = pod("never", gpus=1, priority=1000)
        never["spec"]["preemptionPolicy"] = "Never"
        same = pod("same", gpus=1, priority=100)
        for p in (never, same):
            out = await post(client, "/filter", names_body(p, ["node-0"]))
            assert out["NodeNames"] == []
        assert runtime.extender.preemptor.nominations == {}
        assert backend.store.get("pods", "default/busy-node-0-0") is not None


async def test_follower_does_not_preempt() -> None:
    backend = cluster(1, gpus=1, pods=full_node_pods("node-0", 1, priority=1))
    async with running(backend) as (client, runtime):
        runtime.extender.is_leader = lambda: False
        out = await post(client, "/filter", names_body(pod("vip", gpus=1, priority=1000), ["node-0"]))
        assert out["NodeNames"] == []
        assert runtime.extender.preemptor.nominations == {}


async def test_a_leader_deposed_while_evicting_deletes_nothing_more() -> None:
    """Fencing (issue 12): each victim's deletion is a write, checked against the lease just before."""
    backend = cluster(1, gpus=1, pods=full_node_pods("node-0", 1, priority=10, prefix="low"))
    async with running(backend) as (client, runtime):
        preemptor = runtime.extender.preemptor
        leading = [True]
        preemptor.is_leader = lambda: leading[0]

        class LeaseLostWhileWriting:  # the lease ages past its deadline during the event's write
            def __getattr__(self, name: str) -> Any:
                return getattr(backend, name)

            async def record_event(self, namespace: str, event: dict[str, Any]) -> None:
                leading[0] = False
                await backend.record_event(namespace, event)

        preemptor.backend = LeaseLostWhileWriting()  # type: ignore[assignment]
        out = await post(client, "/filter", names_body(pod("vip", gpus=1, priority=1000), ["node-0"]))
        assert out["NodeNames"] == [] and "default/vip" in preemptor.nominations
        await asyncio.gather(*preemptor.tasks)
        assert backend.store.get("pods", "default/low-node-0-0") is not None  # not deleted
        assert preemptor.evicted == 0


async def test_a_claims_devices_are_never_preempted() -> None:
    """DRA (issue 38): a claim's record is no pod: a high-priority pod does not evict it (docs/dra.md)."""
    from devshare.engine.dra.allocate import record_request
    from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
    from devshare.model.dra import parse_claim

    backend = cluster(1, gpus=1)
    async with running(backend) as (client, runtime):
        await settle(runtime, backend)
        claim = parse_claim({"metadata": {"name": "c", "namespace": "default"}, "spec": {"devices": {}}})
        grant = DeviceGrant(type="gpu", minor=0, id="", core_milli=1000, memory=0, memory_ratio_milli=1000)
        runtime.state.add_bound(record_request(claim), PodAllocation(
            node="node-0", containers=(ContainerAllocation(name="gpu", devices=(grant,)),)))
        vip = pod("vip", gpus=1, priority=1000)
        out = await post(client, "/filter", names_body(vip, ["node-0"]))
        assert out["NodeNames"] == []
        assert "default/vip" not in runtime.extender.preemptor.nominations
