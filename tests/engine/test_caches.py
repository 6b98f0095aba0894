"""The engine's caches (engine/caches.py): an answer kept between pods equals the answer computed
afresh, whatever field of the pod a policy reads, and bounded caches drop their oldest entry."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.caches import LRU, EngineCaches
from devshare.engine.fit import FitView
from devshare.engine.policies.base import Choice
from devshare.engine.policies.binpack import BinpackPolicy
from devshare.engine.scheduler import PodEvaluation, Scheduler
from devshare.engine.state import ClusterState
from devshare.model.allocation import PodAllocation
from devshare.model.node import NodeInfo
from devshare.model.request import PodRequest
from support.cluster import GiB, add_node, bound, free, gpu, occupy, pod, whole


class ReadsEverything(BinpackPolicy):
    """Row-local, and its score on a node depends on pod fields the old hand-written key left out."""

    def choose(self, view: FitView) -> Choice:
        base = super().choose(view)
        p = view.pod
        salt = hash((p.dialect, p.priority, p.group, tuple(c.name for c in p.containers))) % 997
        rows = view.rows.astype(np.float64)
        return Choice(base.scores + np.sin(rows * (salt + 1)), base.columns)

    cache_key = None  # type: ignore[assignment]  # declares nothing: the safe default applies


def warm_and_cold(sched: Scheduler, p: PodRequest, rows: np.ndarray) -> tuple[PodEvaluation, PodEvaluation]:
    """``p`` evaluated over ``rows`` with the caches as they are, and again with none kept (the caches
    are put back afterwards)."""
    state = sched.state
    warm = sched.evaluate(p, rows)
    kept = state.caches
    state.caches = EngineCaches(state)
    cold = sched.evaluate(p, rows)
    state.caches = kept
    return warm, cold


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
        warm, cold = warm_and_cold(sched, p, rows)
        assert np.allclose(warm.scores, cold.scores)


def change(state: ClusterState, held: list[str], k: int, step: tuple[object, ...]) -> bool:
    """Apply step ``k`` when it changes the cluster (False: it asks for an evaluation): ("bind", node,
    card, share) records a pod there; ("release",) removes the oldest; ("cpu", node) records a pod
    without devices taking 1 CPU there; ("cordon", node, on) marks the node (un)schedulable."""
    if step[0] == "bind":
        _, node, card, core = step
        held.append(f"b{k}")
        bound(state, f"b{k}", f"n{node}", int(card), core=int(core), memory=GiB)  # type: ignore[call-overload]
    elif step[0] == "release":
        if held:
            free(state, f"default/{held.pop(0)}")
    elif step[0] == "cpu":
        held.append(f"c{k}")
        occupy(state, PodRequest(namespace="default", name=f"c{k}", cpu_milli=1000),
                        PodAllocation(node=f"n{step[1]}", containers=()))
    elif step[0] == "cordon":
        _, node, on = step
        state.upsert_node(NodeInfo(name=f"n{node}", cpu_milli=2000, unschedulable=bool(on)))
    else:
        return False
    return True


# one step: ("bind", node, card, share) records a pod there; ("release", ...) removes the oldest;
# ("evaluate", window, share, count) asks a pod's answer over the nodes of the window
steps = st.one_of(
    st.tuples(st.just("bind"), st.integers(0, 7), st.integers(0, 3), st.sampled_from([100, 250, 500, 1000])),
    st.tuples(st.just("release"), st.just(0), st.just(0), st.just(0)),
    st.tuples(st.just("evaluate"), st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True),
              st.sampled_from([10, 25, 50, 100]), st.sampled_from([1, 2])),
)


@settings(max_examples=60, deadline=None)
@given(seq=st.lists(steps, min_size=2, max_size=14))
def test_answers_kept_across_windows_and_binds_equal_fresh_ones(seq: list[tuple[object, ...]]) -> None:
    """Each pod sees another window of candidates (kube-scheduler's rotating window) while binds change
    nodes in and out of it: an answer kept, or refreshed for a node outside the window, is what a
    cold evaluation of that window gives, scores and devices."""
    state = ClusterState()
    for i in range(8):
        add_node(state, f"n{i}", 4)
    sched = Scheduler(state, policy=ReadsEverything())
    held: list[str] = []
    for k, step in enumerate(seq):
        if not change(state, held, k, step):
            _, window, share, count = step
            p = pod(f"p{k}", gpu(float(share), GiB, count=int(count)))  # type: ignore[arg-type]
            rows = state.node_rows([f"n{i}" for i in window])  # type: ignore[attr-defined]
            warm, cold = warm_and_cold(sched, p, rows)
            assert np.array_equal(warm.codes, cold.codes)
            assert np.allclose(warm.scores, cold.scores)
            for i in np.flatnonzero(warm.codes == 0).tolist():
                assert warm.allocation(state, i) == cold.allocation(state, i)


def test_a_changed_node_outside_the_window_is_scored_in_the_next_call() -> None:
    state = ClusterState()
    for i in range(4):
        add_node(state, f"n{i}", 4)
    calls: list[int] = []

    class Counting(ReadsEverything):
        def choose(self, view: FitView) -> Choice:
            calls.append(len(view.rows))
            return super().choose(view)

    sched = Scheduler(state, policy=Counting())
    shape = gpu(20, GiB)
    sched.evaluate(pod("a", shape), state.node_rows())  # every node scored once
    bound(state, "x", "n0", 0, core=1000)  # card 0 of n0 full: a binpacker's first choice were it to fit
    bound(state, "y", "n0", 1, core=500)
    bound(state, "z", "n3", 0, core=200)
    calls.clear()
    sched.evaluate(pod("b", shape), state.node_rows(["n3", "n2"]))  # n3 changed: scored, and n0 with it
    assert calls == [2]
    calls.clear()
    rows = state.node_rows(["n0", "n1"])
    warm = sched.evaluate(pod("c", shape), rows)  # n0's answer is already fresh
    assert calls == []
    state.caches = EngineCaches(state)
    cold = sched.evaluate(pod("c", shape), rows)
    assert warm.allocation(state, 0) == cold.allocation(state, 0)
    assert warm.allocation(state, 0).containers[0].devices[0].minor == 1  # the fullest card that fits


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


# one step of a cluster under load: ("bind", node, card, share), ("release",), ("cordon", node, on),
# ("cpu", node): a pod without devices takes 1 CPU there, ("evaluate", window, share, count, cpu, policy)
changes = st.one_of(
    st.tuples(st.just("bind"), st.integers(0, 5), st.integers(0, 2), st.sampled_from([100, 500, 1000])),
    st.tuples(st.just("release")),
    st.tuples(st.just("cordon"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("cpu"), st.integers(0, 5)),
    st.tuples(st.just("evaluate"), st.lists(st.integers(0, 5), min_size=1, max_size=6, unique=True),
              st.sampled_from([0, 30, 60, 100]), st.sampled_from([1, 2]), st.sampled_from([0, 1500]),
              st.sampled_from(["binpack", "devshare"])),
)


@settings(max_examples=80, deadline=None)
@given(seq=st.lists(changes, min_size=2, max_size=16))
def test_whole_answers_kept_per_node_equal_fresh_ones(seq: list[tuple[object, ...]]) -> None:
    """Scheduler.evaluate keeps each node's whole answer (code, score, devices) per pod shape until
    the node changes, and answers a window from it: codes, scores, devices and every failing node's
    reason equal a cold evaluation's, through binds, releases, cordons and windows that rotate."""
    from devshare.engine.policies.devshare import DevsharePolicy

    state = ClusterState()
    for i in range(6):
        add_node(state, f"n{i}", 3)
        state.upsert_node(NodeInfo(name=f"n{i}", cpu_milli=2000))
    scheds = {"binpack": Scheduler(state), "devshare": Scheduler(state, policy=DevsharePolicy())}
    held: list[str] = []
    for k, step in enumerate(seq):
        if not change(state, held, k, step):
            _, window, share, count, cpu, which = step
            ask = gpu(float(share), GiB, count=int(count)) if share else whole(int(count))  # type: ignore[arg-type]
            p = pod(f"p{k}", ask, cpu_milli=int(cpu))  # type: ignore[call-overload]
            rows = state.node_rows([f"n{i}" for i in window])  # type: ignore[attr-defined]
            warm, cold = warm_and_cold(scheds[str(which)], p, rows)
            assert np.array_equal(warm.codes, cold.codes)
            assert np.allclose(warm.scores, cold.scores)
            for i in range(len(rows)):
                if warm.codes[i] == 0:
                    assert warm.allocation(state, i) == cold.allocation(state, i)
                else:
                    assert warm.reason(i) == cold.reason(i)


def test_a_cluster_without_the_asked_devices_is_evaluated_once_per_change() -> None:
    """No Device lists a GPU yet: every node fails, and that answer is kept like any other (one
    evaluation for the first pod, none for the next of its shape), with its reason."""
    state = ClusterState()
    for i in range(3):
        state.upsert_node(NodeInfo(name=f"n{i}"))
    sched = Scheduler(state)
    calls: list[int] = []
    plain = sched._evaluate

    def counting(p: PodRequest, rows: np.ndarray) -> PodEvaluation:
        calls.append(len(rows))
        return plain(p, rows)

    sched._evaluate = counting  # type: ignore[method-assign]
    rows = state.node_rows()
    first = sched.evaluate(pod("a", gpu(20, GiB)), rows)
    assert calls == [3]
    again = sched.evaluate(pod("b", gpu(20, GiB)), rows)
    assert calls == [3]
    assert (first.codes == again.codes).all() and (again.codes != 0).all()
    assert again.reason(0) == first.reason(0) == "node has no gpu devices (no Device object lists any)"

