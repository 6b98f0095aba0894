"""The engine's caches (engine/caches.py): an answer kept between pods equals the answer computed
afresh, whatever field of the pod a policy reads, and bounded caches drop their oldest entry."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.caches import LRU, EngineCaches
from devshare.engine.policies.binpack import BinpackPolicy
from devshare.engine.policies.protocol import Choice, FitView
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.request import PodRequest
from support.cluster import GiB, add_node, bound, gpu, pod


class ReadsEverything(BinpackPolicy):
    """Row-local, and its score on a node depends on pod fields the old hand-written key left out."""

    def choose(self, view: FitView) -> Choice:
        base = super().choose(view)
        p = view.pod
        salt = hash((p.dialect, p.priority, p.group, tuple(c.name for c in p.containers))) % 997
        rows = view.rows.astype(np.float64)
        return Choice(base.scores + np.sin(rows * (salt + 1)), base.columns)

    cache_key = None  # type: ignore[assignment]  # declares nothing: the safe default applies


pods = st.builds(
    lambda i, dialect, priority, cname: PodRequest(
        namespace="default", name=f"p{i}", priority=priority, dialect=dialect,
        containers=pod("x", gpu(20, GiB)).containers[:1] if cname == "c0" else
        tuple(c.__class__(name=cname, devices=c.devices) for c in pod("x", gpu(20, GiB)).containers)),
    st.integers(0, 1000), st.sampled_from(["koordinator", "nvidia", "mgpu", "aliyun"]), st.integers(0, 3),
    st.sampled_from(["c0", "main", "side"]))


@settings(max_examples=40, deadline=None)
@given(seq=st.lists(pods, min_size=2, max_size=6))
def test_a_policy_reading_any_pod_field_never_gets_a_stale_answer(seq: list[PodRequest]) -> None:
    state = ClusterState()
    for i in range(4):
        add_node(state, f"n{i}", 2)
    bound(state, "used", "n1", 0, core=500, memory=2 * GiB)
    sched = Scheduler(state, policy=ReadsEverything())
    rows = state.node_rows()
    for p in seq:
        warm = sched.evaluate(p, rows)
        kept = state.caches
        state.caches = EngineCaches(state)
        cold = sched.evaluate(p, rows)
        state.caches = kept
        assert np.allclose(warm.scores, cold.scores)


def test_a_declared_key_shares_answers_across_pods_that_differ_elsewhere() -> None:
    state = ClusterState()
    add_node(state, "n0", 2)
    sched = Scheduler(state)  # BinpackPolicy declares cache_key = the per-device ask
    sched.evaluate(pod("a", gpu(20, GiB), priority=1), state.node_rows())
    sched.evaluate(pod("b", gpu(20, GiB), priority=7), state.node_rows())
    assert len(state.caches._per_node["policy answers"]) == 1


def test_lru_drops_the_least_recently_used_only() -> None:
    lru: LRU[int, str] = LRU(2)
    lru.put(1, "a")
    lru.put(2, "b")
    assert lru.get(1) == "a"
    lru.put(3, "c")
    assert lru.get(2) is None and lru.get(1) == "a" and lru.get(3) == "c"
    assert len(lru) == 2
