"""GPU preemption (server/extender/preemption.py): driven by the extender (kube-scheduler's own preemption
cannot see devices), its nominations held by the lifecycle, and the what-if questions asked on a copy of
the node (the live state is never touched, and the victims named do make room)."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.allocation import PodAllocation
from devshare.server.extender.preemption import needed_victims
from support.cluster import GiB, add_node, gpu, usage_key, whole
from support.cluster import pod as request
from support.extender import Switch, cluster, full_node_pods, names_body, pod, post, running, settle
from support.waiting import eventually as until


async def test_high_priority_pod_evicts_the_cheapest_lower_priority_victims() -> None:
    # node-0: one card held by a priority-10 pod; node-1: one card held by a priority-100 pod
    backend = cluster(2, gpus=1, pods=[*full_node_pods("node-0", 1, priority=10, prefix="low"),
                                       *full_node_pods("node-1", 1, priority=100, prefix="mid")])
    async with running(backend) as (client, runtime):
        vip = pod("vip", gpus=1, priority=1000)
        out = await post(client, "/filter", names_body(vip, ["node-0", "node-1"]))
        assert out["NodeNames"] == []
        nom = runtime.extender.lifecycle.nominations["default/vip"]
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
        assert "default/other" not in runtime.extender.lifecycle.nominations  # nothing lower to evict
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
        assert runtime.extender.lifecycle.nominations == {}
        assert backend.store.get("pods", "default/busy-node-0-0") is not None


async def test_follower_does_not_preempt() -> None:
    backend = cluster(1, gpus=1, pods=full_node_pods("node-0", 1, priority=1))
    async with running(backend, leadership=Switch(leading=False)) as (client, runtime):
        out = await post(client, "/filter", names_body(pod("vip", gpus=1, priority=1000), ["node-0"]))
        assert out["NodeNames"] == []
        assert runtime.extender.lifecycle.nominations == {}


async def test_a_leader_deposed_while_evicting_deletes_nothing_more() -> None:
    """Fencing (issue 12): each victim's deletion is a write, checked against the lease just before."""
    backend = cluster(1, gpus=1, pods=full_node_pods("node-0", 1, priority=10, prefix="low"))
    lease = Switch()

    class LeaseLostWhileWriting:  # the lease ages past its deadline during the event's write
        def __getattr__(self, name: str) -> Any:
            return getattr(backend, name)

        async def record_event(self, namespace: str, event: dict[str, Any]) -> None:
            lease.leading = False
            await backend.record_event(namespace, event)

    async with running(LeaseLostWhileWriting(), leadership=lease) as (client, runtime):
        preemptor = runtime.extender.preemption
        out = await post(client, "/filter", names_body(pod("vip", gpus=1, priority=1000), ["node-0"]))
        assert out["NodeNames"] == [] and "default/vip" in runtime.extender.lifecycle.nominations
        await asyncio.gather(*preemptor.tasks)
        assert backend.store.get("pods", "default/low-node-0-0") is not None  # not deleted
        assert preemptor.evicted == 0


asks = st.sampled_from([gpu(30, 2 * GiB), gpu(50, 4 * GiB), gpu(70, 8 * GiB), whole(1), whole(2)])


@settings(max_examples=80, deadline=None)
@given(held=st.lists(st.tuples(asks, st.booleans()), max_size=8), ask=asks)
def test_needed_victims_leaves_the_live_state_alone_and_makes_room(
        held: list[tuple[object, bool]], ask: object) -> None:
    state = ClusterState()
    add_node(state, "n", 4)
    add_node(state, "m", 2)
    lc = Lifecycle(Scheduler(state), ttl=30.0)
    for i, (a, bind) in enumerate(held):
        p = request(f"v{i}", a, priority=i % 3)  # type: ignore[arg-type]
        placed = lc.scheduler.place(p, ["n"])
        if placed is not None:
            lc.assume(p, placed.allocation, now=float(i))
            if bind:
                lc.confirm(p, placed.allocation)
    before_usage = usage_key(state)
    before_pods = {k: (r.phase, r.expires_at, r.allocation) for k, r in state.pods.items()}
    asker = request("asker", ask, priority=10)  # type: ignore[arg-type]
    keys = sorted(state.pods, key=lambda k: state.pods[k].pod.priority)
    needed = needed_victims(lc, asker, "n", keys)
    assert usage_key(state) == before_usage
    assert {k: (r.phase, r.expires_at, r.allocation) for k, r in state.pods.items()} == before_pods
    for k in keys if needed is None else needed:
        lc.release(k)
    assert isinstance(lc.scheduler.allocate_on(asker, "n"), PodAllocation) is (needed is not None)
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
        runtime.extender.lifecycle.add_watched(record_request(claim), PodAllocation(
            node="node-0", containers=(ContainerAllocation(name="gpu", devices=(grant,)),)))
        vip = pod("vip", gpus=1, priority=1000)
        out = await post(client, "/filter", names_body(vip, ["node-0"]))
        assert out["NodeNames"] == []
        assert "default/vip" not in runtime.extender.lifecycle.nominations
