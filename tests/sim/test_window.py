from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.handlers.base import Settings
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.policies import make_policy
from devshare.engine.scheduler import Scheduler
from devshare.sim.replay import build_state, node_rank, pod_request, replay
from devshare.sim.runner import policy_for
from devshare.sim.trace import Trace, TraceNode, TracePod, load_trace
from devshare.sim.window import ADAPTIVE, Window, nodes_to_find, schedule

CPU = 32000
MEM = 131072  # MiB


def cluster(gpus: list[int], cpu: list[int] | None = None) -> Trace:
    """A trace with one node per entry of ``gpus`` (that many T4 cards), ``cpu`` milli-CPU each."""
    cpu = cpu or [CPU] * len(gpus)
    nodes = tuple(TraceNode(f"n{i:04d}", c, MEM, g, "T4" if g else "") for i, (g, c) in
                  enumerate(zip(gpus, cpu, strict=True)))
    return Trace("t", nodes, (TracePod("p", 1000, 1024, 1, 1000),))


def engine(trace: Trace, seed: int = 42) -> Lifecycle:
    state = build_state(trace)
    node_rank(state, seed)
    return Lifecycle(Scheduler(state, policy=make_policy("bestfit"), settings=Settings(topology=False)))


def pod(name: str, cpu: int = 1000, gpus: int = 1, milli: int = 1000) -> TracePod:
    return TracePod(name, cpu, 1024, gpus, milli if gpus else 0)


@pytest.mark.parametrize(("n", "pct", "expected"), [
    (1, ADAPTIVE, 1), (50, 1, 50), (99, ADAPTIVE, 99),  # under 100 nodes: every node
    (100, 1, 100), (1213, 1, 100), (5000, 1, 100), (20000, 1, 200),  # 1%, at least 100
    (1213, ADAPTIVE, 497),  # 50 - 1213/125 = 41% (integer division, as in Go)
    (5000, ADAPTIVE, 500),  # 50 - 40 = 10%
    (10000, ADAPTIVE, 500), (30000, ADAPTIVE, 1500),  # 50 - 80 < 5: 5%
    (1213, 10, 121), (1213, 5, 100), (1213, 100, 1213),
])
def test_window_size_follows_kube_scheduler(n: int, pct: int, expected: int) -> None:
    assert nodes_to_find(n, pct) == expected


def test_window_size_rejects_a_percentage_out_of_range() -> None:
    for bad in (-1, 101):
        with pytest.raises(ValueError, match="between 0 and 100"):
            nodes_to_find(500, bad)


def test_walk_order_is_the_seeds_node_order_and_the_index_rotates_by_nodes_processed() -> None:
    lc = engine(cluster([1] * 150))
    state = lc.state
    w = Window(state, 1)
    assert w.k == 100 and w.n == 150
    assert state.rank[w.order].tolist() == sorted(state.rank[w.order].tolist())  # lowest rank first
    assert not np.array_equal(w.order, np.sort(w.order))  # the seed permuted the node list
    p = pod_request(pod("a"))
    first = next(w.walk(p))
    assert first.tolist() == w.order[:100].tolist() and w.start == 100
    second = next(w.walk(p))  # the next pod starts where the last cycle stopped, and wraps around
    assert second.tolist() == [*w.order[100:].tolist(), *w.order[:50].tolist()] and w.start == 50
    # ten nodes short of CPU among the next walk's: they count as processed but are not candidates
    short = w.order[60:70]
    state.cpu_used[short] = CPU
    third = next(w.walk(p))
    assert w.start == 50 + 110 - 150
    assert third.size == 100 and not set(third.tolist()) & set(short.tolist())
    assert (w.cycles, w.walked) == (3, 100 + 100 + 110)


def test_fewer_feasible_nodes_than_the_window_walks_every_node_once() -> None:
    lc = engine(cluster([1] * 120))
    w = Window(lc.state, 1)
    w.start = 30
    lc.state.cpu_used[w.order[:115]] = CPU  # five feasible nodes left
    windows = list(w.walk(pod_request(pod("a"))))
    assert len(windows) == 1 and sorted(windows[0].tolist()) == sorted(w.order[115:].tolist())
    assert w.start == 30  # processed all 120: back where it started


def test_a_pod_that_fits_nowhere_in_the_first_window_is_placed_from_a_later_one() -> None:
    gpus = [0] * 250
    lc = engine(cluster(gpus))
    w = Window(lc.state, 1)
    target = int(w.order[180])  # the one GPU node: in the second window
    gpus[target] = 1
    lc = engine(cluster(gpus))
    w = Window(lc.state, 1)
    assert int(w.order[180]) == target
    placed = schedule(lc, w, pod_request(pod("a")))
    assert placed is not None and placed.node == f"n{target:04d}"
    assert (w.later, w.cycles, w.start) == (1, 2, 200)
    # nothing else fits a GPU pod now: it is retried until every node was walked, then it fails
    assert schedule(lc, w, pod_request(pod("b"))) is None
    assert w.cycles == 2 + 3 and w.start == (200 + 300) % 250  # three windows of 100: 300 >= 250 nodes
    assert lc.state.pods.keys() == {"openb/a"}


def test_under_100_nodes_the_window_is_every_node(small_trace: tuple[Path, Path]) -> None:
    tr = load_trace(*small_trace)  # five nodes: every cycle walks them all, from wherever it starts
    for name in ("devshare", "bestfit"):
        every = replay(tr, policy_for(name, tr, 42), 42)
        assert every.allocated_pct == replay(tr, policy_for(name, tr, 42), 42, window=None).allocated_pct
        for pct in (ADAPTIVE, 1):
            r = replay(tr, policy_for(name, tr, 42), 42, window=pct)
            assert r.allocated_pct == every.allocated_pct and r.pods_placed == every.pods_placed, (name, pct)
            assert r.extra["window_nodes"] == 5 and r.extra["window_later_pods"] == 0
        assert "window_nodes" not in every.extra


def test_a_window_of_every_node_changes_nothing_on_a_bigger_cluster() -> None:
    rng = np.random.default_rng(7)
    gpus = rng.integers(0, 5, size=130).tolist()
    cpu = rng.choice([8000, 16000, 32000], size=130).tolist()
    shapes = [(4000, 1, 500), (8000, 1, 1000), (2000, 0, 0), (16000, 2, 1000), (6000, 1, 250)]
    pods = tuple(pod(f"p{i:03d}", c, g, m) for i, (c, g, m) in enumerate(shapes[k] for k in rng.integers(0, 5, 300)))
    tr = Trace("big", cluster(gpus, cpu).nodes, pods)
    every = replay(tr, policy_for("devshare", tr, 43), 43)
    whole = replay(tr, policy_for("devshare", tr, 43), 43, window=100)  # 100% of 130 nodes
    assert whole.extra["window_nodes"] == 130
    assert whole.allocated_pct == every.allocated_pct and whole.pods_placed == every.pods_placed
    narrow = replay(tr, policy_for("devshare", tr, 43), 43, window=1)  # 100 of 130: a real window
    assert narrow.extra["window_nodes"] == 100 and narrow.extra["window_cycles_per_pod"] >= 1


@settings(max_examples=40, deadline=None)
@given(n=st.integers(100, 240), pct=st.sampled_from([ADAPTIVE, 1, 5, 40]), seed=st.integers(0, 10**6),
       data=st.data())
def test_every_node_is_reachable(n: int, pct: int, seed: int, data: st.DataObject) -> None:
    """A pod that fits some node is never left out because of the window: it is placed from some
    window, and each pod's windows cover every node kube-scheduler's filters pass."""
    rng = np.random.default_rng(seed)
    gpus = rng.choice([0, 0, 0, 1, 2], size=n).tolist()
    cpu = rng.choice([4000, 8000, 32000], size=n).tolist()
    lc = engine(cluster(gpus, cpu), seed)
    w = Window(lc.state, pct)
    w.start = data.draw(st.integers(0, n - 1))
    fillers = data.draw(st.integers(0, 2 * sum(gpus)))
    for i in range(fillers):  # fill some cards and CPU, through the windows
        cpu_i, g, m = [(2000, 1, 1000), (4000, 1, 500), (6000, 0, 0), (1000, 2, 1000)][int(rng.integers(0, 4))]
        schedule(lc, w, pod_request(pod(f"f{i}", cpu_i, g, m)))
    cpu_p = data.draw(st.sampled_from([1000, 4000, 8000, 30000]))
    g = data.draw(st.integers(0, 2))
    p = pod_request(pod("probe", cpu_p, g, data.draw(st.sampled_from([250, 1000])) if g == 1 else 1000))
    anywhere = lc.scheduler.place(p)  # every node, as without the window
    feasible = set(w.order[w.feasible(p)].tolist())
    start = w.start
    covered = set().union(*(set(rows.tolist()) for rows in w.walk(p)))
    assert covered == feasible
    w.start = start
    placed = schedule(lc, w, p)
    assert (placed is None) == (anywhere is None)
