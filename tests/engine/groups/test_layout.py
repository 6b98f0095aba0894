"""Seed 003 group layout (engine/groups/layout.py): how many members each node takes, the fewest and
cheapest nodes, the GPUs each member gets there, all worked out without touching the live state."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.groups.layout import (
    Layout,
    capacities,
    choose_nodes,
    free_gpus,
    gpu_minors,
    plan_layout,
    split_whole,
    untouched_gpus,
    whole_allocation,
    whole_gpus,
)
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.engine.topology import best_set
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.request import DeviceRequest, GroupRef, PodRequest
from support import REPO
from support.cluster import GiB, add_node, bound, gpu, hold, pod, usage_key, whole

MATRIX = json.loads((REPO / "examples" / "topologies" / "seed-8gpu-bandwidth.json").read_text())["bandwidth_gbps"]


def cluster(*nodes: str, gpus: int = 8, bandwidth: bool = False) -> ClusterState:
    s = ClusterState()
    for n in nodes:
        add_node(s, n, gpus, bandwidth=MATRIX if bandwidth and gpus == 8 else None)
    return s


def member(i: int, count: int = 2, *, replicas: int = 2, containers: int = 1) -> PodRequest:
    return pod(f"job-{i}", *[whole(count)] * containers, group=GroupRef(name="job", replicas=replicas))


def take(state: ClusterState, node: str, minors: list[int], name: str) -> None:
    """Another pod holding whole GPUs."""
    for m in minors:
        bound(state, f"{name}-{m}", node, m, core=1000, memory=16 * GiB)


def test_layout_spreads_over_the_fewest_nodes_with_least_left_over() -> None:
    s = cluster("a", "b", "c", "d", gpus=8, bandwidth=False)
    take(s, "a", [0, 1, 2, 3, 4, 5], "x")  # a: 2 free
    take(s, "c", [0, 1], "y")  # c: 6 free
    sch = Scheduler(s)
    layout = plan_layout(sch, member(0, 2, replicas=7), 7, s.node_rows())
    # 14 GPUs: caps a1 b4 c3 d4 -> two nodes need 4+3 (b or d, and c): 8+6-14 = 0 left
    assert layout.missing == 0 and layout.leftover == 0
    assert sorted(layout.nodes) == ["b", "c"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 12)), min_size=1, max_size=7),
       st.integers(1, 12))
def test_choose_nodes_is_the_cheapest_of_the_fewest(nodes: list[tuple[int, int]], target: int) -> None:
    cap = np.array([c for c, _ in nodes], np.int64)
    cost = np.array([float(w) for _, w in nodes])
    rank = np.arange(len(nodes), dtype=np.int64)
    got = choose_nodes(cap, cost, rank, target)
    want = min(target, int(np.minimum(cap, target).sum()))
    assert sum(n for _, n in got) == want
    assert all(0 < n <= cap[i] for i, n in got)
    if want == 0:
        assert got == []
        return
    best = None
    for k in range(1, len(nodes) + 1):
        for combo in itertools.combinations(range(len(nodes)), k):
            if sum(min(int(cap[i]), target) for i in combo) >= want:
                c = sum(cost[i] for i in combo)
                best = c if best is None else min(best, c)
        if best is not None:
            assert len(got) == k
            assert sum(cost[i] for i, _ in got) == best
            return


@settings(max_examples=40, deadline=None)
@given(used=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.sampled_from([200, 500, 900])), max_size=6),
       share=st.sampled_from([gpu(30, GiB), gpu(50, 4 * GiB), gpu(20, GiB, count=2)]), count=st.integers(1, 6))
def test_laying_out_shares_never_touches_the_live_state(used: list[tuple[int, int, int]], share: object,
                                                        count: int) -> None:
    """Members asking shares are tried on a scratch copy of the nodes (groups.what_if): the live
    state, its versions included, is exactly as it was, and the layout fits there member by member."""
    s = ClusterState()
    for n in range(3):
        add_node(s, f"n{n}", 4)
    for k, (n, minor, core) in enumerate(used):
        bound(s, f"u{k}", f"n{n}", minor, core=core, memory=GiB)
    before = (s.version, s.row_version.copy(), usage_key(s), dict(s.pods))
    template = pod("job", share)  # type: ignore[arg-type]
    layout = plan_layout(Scheduler(s), template, count, s.node_rows())
    assert (s.version, usage_key(s), dict(s.pods)) == (before[0], before[2], before[3])
    assert (s.row_version == before[1]).all()
    for i, alloc in enumerate(layout.allocations):  # and what was laid out fits, member after member
        hold(s, pod(f"m{i}", share), alloc, ttl=60)  # type: ignore[arg-type]


def test_whole_gpus_is_the_vectorized_path_s_ask() -> None:
    assert whole_gpus(pod("a", whole(2), whole(1))) == 3
    assert whole_gpus(pod("b", whole(2), gpu(50))) is None  # a share: probed node by node
    assert whole_gpus(pod("c", DeviceRequest(type="rdma", core_milli=1000, memory_ratio_milli=1000))) is None
    assert whole_gpus(pod("d")) is None


def test_untouched_and_free_gpus_skip_used_and_unusable_cards() -> None:
    s = ClusterState()
    add_node(s, "n0", 4, unhealthy=[3])
    add_node(s, "n1", 2)
    bound(s, "share", "n0", 1, core=300)
    bound(s, "mem-only", "n0", 2, memory=GiB)  # no compute, but no longer untouched
    rows = s.node_rows()
    untouched = untouched_gpus(s, rows)
    assert untouched[:, :4].tolist() == [[True, False, False, False], [True, True, False, False]]
    assert not untouched[:, 4:].any()  # the table's spare columns hold no device
    assert free_gpus(s, rows).tolist() == [1.0 + 0.7 + 1.0, 2.0]
    empty = ClusterState()
    add_node(empty, "cpu", 0)
    assert untouched_gpus(empty, empty.node_rows()).shape == (1, 0)
    assert free_gpus(empty, empty.node_rows()).tolist() == [0.0]


def test_capacities_count_whole_members_per_node_and_drop_nodes_a_member_cannot_use() -> None:
    s = ClusterState()
    add_node(s, "eight", 8, model="A100")
    add_node(s, "five", 5, model="A100")
    add_node(s, "t4", 8, model="T4")
    take(s, "five", [0], "x")
    template = pod("job", whole(2), gpu_models=("A100",))
    assert capacities(Scheduler(s), template, s.node_rows(), 10).tolist() == [4, 2, 0]
    assert capacities(Scheduler(s), template, s.node_rows(), 3).tolist() == [3, 2, 0]
    assert capacities(Scheduler(s), template, s.node_rows(), 0).tolist() == [0, 0, 0]


def test_capacities_of_shares_are_probed_member_after_member() -> None:
    s = ClusterState()
    add_node(s, "a", 2)
    add_node(s, "b", 1)
    bound(s, "x", "b", 0, core=600)
    assert capacities(Scheduler(s), pod("job", gpu(50, GiB)), s.node_rows(), 8).tolist() == [4, 0]
    assert capacities(Scheduler(s), pod("job", gpu(40, GiB)), s.node_rows(), 8).tolist() == [4, 1]


def test_split_whole_without_a_matrix_takes_the_lowest_free_gpus_in_turn() -> None:
    s = cluster("n")
    take(s, "n", [1, 4], "x")
    row = s.row_of["n"]
    assert split_whole(s, row, 3, 2) == [[0, 2], [3, 5], [6, 7]]
    with pytest.raises(ValueError, match="has 6 free GPUs, 8 asked"):
        split_whole(s, row, 4, 2)


def test_split_whole_with_a_matrix_takes_the_best_union_then_the_best_part_each() -> None:
    s = cluster("n", bandwidth=True)
    row = s.row_of["n"]
    parts = split_whole(s, row, 2, 2)
    union = sorted(c for p in parts for c in p)
    best = best_set(MATRIX, list(range(8)), 4)
    assert best is not None and union == list(best.gpus)
    first = best_set(MATRIX, union, 2)
    assert first is not None and parts[0] == list(first.gpus)
    # topology off: as without a matrix
    assert split_whole(s, row, 2, 2, topology=False) == [[0, 1], [2, 3]]


def test_whole_allocation_gives_each_container_its_gpus_in_order() -> None:
    s = cluster("n", gpus=4)
    template = pod("job", whole(1), whole(2))
    alloc = whole_allocation(s, s.row_of["n"], template, [3, 0, 2])
    assert alloc.node == "n"
    assert [[g.minor for g in c.devices] for c in alloc.containers] == [[0], [2, 3]]
    assert all(g.core_milli == 1000 and g.memory == 16 * GiB for _, g in alloc.grants())
    assert gpu_minors(alloc) == [0, 2, 3]


def test_gpu_minors_are_the_distinct_gpus_of_every_container() -> None:
    alloc = PodAllocation(node="n", containers=(
        ContainerAllocation(name="a", devices=(DeviceGrant(type="gpu", minor=3), DeviceGrant(type="rdma", minor=0))),
        ContainerAllocation(name="b", devices=(DeviceGrant(type="gpu", minor=3), DeviceGrant(type="gpu", minor=1))),
    ))
    assert gpu_minors(alloc) == [1, 3]


def test_nothing_to_lay_out_and_too_few_places() -> None:
    s = cluster("a", gpus=4)
    sch = Scheduler(s)
    assert plan_layout(sch, member(0), 0, s.node_rows()) == Layout((), 0, 0.0)
    assert plan_layout(sch, member(0), -2, s.node_rows()) == Layout((), 0, 0.0)
    assert plan_layout(sch, member(0), 2, np.zeros(0, np.int64)) == Layout((), 2, 0.0)
    partial = plan_layout(sch, member(0, 2, replicas=3), 3, s.node_rows())
    assert partial.missing == 1 and len(partial.allocations) == 2 and partial.nodes == ("a",)
    assert partial.leftover == 0.0


def test_layout_nodes_are_listed_once_in_order() -> None:
    allocs = tuple(PodAllocation(node=n, containers=()) for n in ("b", "b", "a", "b"))
    assert Layout(allocs, 0, 0.0).nodes == ("b", "a")
