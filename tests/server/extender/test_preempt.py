"""Preemption asks its what-if questions on a scratch copy of the node (server/extender/preempt.py):
the live state is never touched, and the victims it names do make room."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.allocation import PodAllocation
from devshare.server.extender.preempt import needed_victims
from support.cluster import GiB, add_node, gpu, pod, whole

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
        p = pod(f"v{i}", a, priority=i % 3)  # type: ignore[arg-type]
        placed = lc.scheduler.place(p, ["n"])
        if placed is not None:
            lc.assume(p, placed.allocation, now=float(i))
            if bind:
                lc.confirm(p, placed.allocation)
    before_usage = state.usage_key()
    before_pods = {k: (r.phase, r.expires_at, r.allocation) for k, r in state.pods.items()}
    asker = pod("asker", ask, priority=10)  # type: ignore[arg-type]
    keys = sorted(state.pods, key=lambda k: state.pods[k].pod.priority)
    needed = needed_victims(lc.scheduler, asker, "n", keys)
    assert state.usage_key() == before_usage
    assert {k: (r.phase, r.expires_at, r.allocation) for k, r in state.pods.items()} == before_pods
    if needed is None:
        for k in keys:
            state.release(k)
        assert not isinstance(lc.scheduler.allocate_on(asker, "n"), PodAllocation)
    else:
        for k in needed:
            state.release(k)
        assert isinstance(lc.scheduler.allocate_on(asker, "n"), PodAllocation)
