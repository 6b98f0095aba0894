"""kube-scheduler's own DRA allocation as a policy: first-fit device, LeastAllocated + Balanced node."""

from __future__ import annotations

import numpy as np

from devshare.engine.policies.firstfit import DraBaselinePolicy, balanced, least_allocated, taint_toleration
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


def test_taint_toleration_is_reverse_normalised_as_kube_scheduler_does() -> None:
    assert taint_toleration(np.array([0, 1, 2])).tolist() == [100, 50, 0]
    assert taint_toleration(np.array([0, 0])).tolist() == [100, 100]


def test_steered_kube_scheduler_puts_a_cpu_only_pod_where_no_gpu_is_wholly_free() -> None:
    """devshare's PreferNoSchedule taint (engine.steering) on the node with a free GPU outweighs the
    CPU it has free, as TaintToleration (weight 3) outweighs LeastAllocated (weight 1)."""
    state = ClusterState()
    for name in ("gpus-free", "gpus-taken"):
        add_node(state, name, 1)
        state.upsert_node(NodeInfo(name=name, cpu_milli=64_000, memory_bytes=256 * 2**30))
    bound(state, "busy", "gpus-taken", 0, core=1000)
    state.cpu_used[state.row_of["gpus-taken"]] = 32_000
    cpu_only = pod("p", cpu_milli=1000)
    assert Scheduler(state, policy=DraBaselinePolicy()).place(cpu_only).node == "gpus-free"  # type: ignore[union-attr]
    assert Scheduler(state, policy=DraBaselinePolicy(steered=True)).place(cpu_only).node == "gpus-taken"  # type: ignore[union-attr]
