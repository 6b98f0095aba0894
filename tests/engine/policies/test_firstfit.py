"""kube-scheduler's own DRA allocation as a policy: first-fit device, LeastAllocated + Balanced node."""

from __future__ import annotations

import numpy as np

from devshare.engine.policies.firstfit import DraBaselinePolicy, balanced, least_allocated
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.node import NodeInfo
from support.cluster import add_node, bound, gpu, pod


def test_scores_follow_kube_schedulers_integer_arithmetic() -> None:
    alloc, used = np.array([4000, 4000]), np.array([0, 3000])
    assert least_allocated(alloc, used, 1000).tolist() == [75, 0]
    # balanced: 50 + (50 + with - without) / 2, fractions' std = |f_cpu - f_mem| / 2
    got = balanced(np.array([4000]), np.array([0]), np.array([4096]), np.array([0]), 1000, 1024)
    assert got.tolist() == [75]


def test_the_first_fitting_device_by_index_is_taken() -> None:
    state = ClusterState()
    add_node(state, "n1", 4)
    bound(state, "busy", "n1", 0, core=900)
    sched = Scheduler(state, policy=DraBaselinePolicy(seed=1))
    placed = sched.place(pod("p", gpu(20, 0)))
    assert placed is not None and placed.allocation.minors("gpu") == [1]  # gpu 0 has only 10% left


def test_the_node_with_the_most_cpu_and_memory_left_wins_gpu_blind() -> None:
    state = ClusterState()
    for name, used in (("busy", 30_000), ("idle", 0)):
        add_node(state, name, 1)
        state.upsert_node(NodeInfo(name=name, cpu_milli=64_000, memory_bytes=256 * 2**30))
        state.cpu_used[state.row_of[name]] = used
    bound(state, "half", "idle", 0, core=500)  # GPU usage does not matter to it
    placed = Scheduler(state, policy=DraBaselinePolicy()).place(pod("p", gpu(10, 0), cpu_milli=1000))
    assert placed is not None and placed.node == "idle"


def test_ties_are_broken_at_random() -> None:
    winners = set()
    for seed in range(20):
        state = ClusterState()
        for n in range(4):
            add_node(state, f"n{n}", 1)
        placed = Scheduler(state, policy=DraBaselinePolicy(seed=seed)).place(pod("p", gpu(10, 0)))
        assert placed is not None
        winners.add(placed.node)
    assert len(winners) > 1
