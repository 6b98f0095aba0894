"""kube-scheduler's own DRA allocation in the replay (:mod:`devshare.sim.dra`): its window counts a node as
feasible only where the pod's GPUs fit, where an extender's window counts CPU and memory only."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.handlers.base import Settings
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.policies import make_policy
from devshare.engine.scheduler import Scheduler
from devshare.sim.dra import DraWindow
from devshare.sim.replay import build_state, node_rank, pod_request
from devshare.sim.trace import Trace, TraceNode, TracePod
from devshare.sim.window import Window, schedule


def cluster(gpus: list[int], cpu: int = 32000) -> Trace:
    nodes = tuple(TraceNode(f"n{i}", cpu, 131072, g, "T4" if g else "") for i, g in enumerate(gpus))
    return Trace("t", nodes, (TracePod("p", 1000, 1024, 1, 1000),))


def windows(trace: Trace) -> tuple[Window, DraWindow, Scheduler]:
    state = build_state(trace)
    node_rank(state, 7)
    sched = Scheduler(state, policy=make_policy("dra-baseline", seed=7), settings=Settings(topology=False))
    return Window(state), DraWindow(state, sched), sched


def feasible_names(win: Window, pod: TracePod) -> set[str]:
    ok = win.feasible(pod_request(pod, pod.name))
    return {win.state.name_of[int(r)] for r in win.order[ok]}


def test_a_gpu_pod_counts_only_the_nodes_where_its_gpus_fit() -> None:
    plain, dra, _ = windows(cluster([0, 1, 2, 4]))
    two = TracePod("two", 1000, 1024, 2, 1000)
    assert feasible_names(plain, two) == {"n0", "n1", "n2", "n3"}  # an extender's window: CPU and memory
    assert feasible_names(dra, two) == {"n2", "n3"}
    half = TracePod("half", 1000, 1024, 1, 500)
    assert feasible_names(dra, half) == {"n1", "n2", "n3"}


def test_cpu_and_memory_still_count_and_cpu_only_pods_see_every_node_that_fits_them() -> None:
    _, dra, _ = windows(cluster([1, 1], cpu=2000))
    assert feasible_names(dra, TracePod("big", 4000, 1024, 1, 1000)) == set()  # GPUs fit, CPU does not
    assert feasible_names(dra, TracePod("cpu", 1000, 1024, 0, 0)) == {"n0", "n1"}


def test_a_card_taken_is_no_longer_feasible_for_a_whole_card() -> None:
    _, dra, sched = windows(cluster([1, 1]))
    lifecycle = Lifecycle(sched)
    placed = schedule(lifecycle, dra, pod_request(TracePod("a", 1000, 1024, 1, 1000), "a"))
    assert placed is not None
    other = ({"n0", "n1"} - {placed.node}).pop()
    assert feasible_names(dra, TracePod("b", 1000, 1024, 1, 1000)) == {other}


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=1, max_size=8), st.integers(0, 4), st.sampled_from([250, 1000]))
def test_the_dra_window_is_the_plain_window_narrowed_to_nodes_with_enough_gpus(gpus: list[int], asks: int,
                                                                               milli: int) -> None:
    plain, dra, _ = windows(cluster(gpus))
    pod = TracePod("p", 1000, 1024, asks, milli if asks else 0)
    base = plain.feasible(pod_request(pod, "p"))
    narrowed = dra.feasible(pod_request(pod, "p"))
    assert not np.any(narrowed & ~base)  # never wider
    enough = {f"n{i}" for i, g in enumerate(gpus) if g >= asks}
    assert feasible_names(dra, pod) == enough
