"""Seed 003 groups and gangs: the seed's example, fewest nodes, pre-occupied plans, re-planning,
all-or-nothing gangs, and the topology annotation."""

from __future__ import annotations

import itertools
import json

import numpy as np

from devshare.engine.groups import Bind, GroupPlanner, MemberPlacement, Refuse, Wait
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.engine.topology import best_set
from devshare.model import names
from devshare.model.annotations import encode_annotations
from devshare.model.request import GroupRef, PodRequest
from support import REPO
from support.cluster import GiB, add_node, bound, gpu, may_bind, occupy, pod, usage_key, whole

TOPOLOGIES = REPO / "examples" / "topologies"
SEED = json.loads((TOPOLOGIES / "seed-8gpu-bandwidth.json").read_text())
MATRIX = SEED["bandwidth_gbps"]


def member(i: int, count: int = 2, *, replicas: int = 2, gang: int | None = None, group: str = "job",
           ns: str = "default", containers: int = 1) -> PodRequest:
    ref = GroupRef(name=group, replicas=replicas, gang_name=group if gang else None, min_available=gang)
    return pod(f"{group}-{i}", *[whole(count)] * containers, ns=ns, group=ref)


def cluster(*nodes: str, gpus: int = 8, bandwidth: bool = True) -> ClusterState:
    s = ClusterState()
    for n in nodes:
        add_node(s, n, gpus, bandwidth=MATRIX if bandwidth and gpus == 8 else None)
    return s


def take(state: ClusterState, node: str, minors: list[int], name: str) -> None:
    """Another pod (bound outside this planner) holding whole GPUs."""
    for m in minors:
        bound(state, f"{name}-{m}", node, m, core=1000, memory=16 * GiB)


def bottleneck(gpus: list[int]) -> float:
    m = np.minimum(np.array(MATRIX), np.array(MATRIX).T)
    return float(min(m[a][b] for a, b in itertools.combinations(gpus, 2)))


def as_placement(d: object) -> MemberPlacement:
    assert isinstance(d, MemberPlacement), d
    return d


def minors(p: MemberPlacement) -> list[int]:
    return sorted(g.minor for _, g in p.allocation.grants())


# ------------------------------------------------------------------------------ the seed's example


def test_seed_example_two_pods_of_two_gpus_get_0123() -> None:
    s = cluster("host04")
    planner = GroupPlanner(Scheduler(s))
    a = as_placement(planner.assign(member(0), now=0))
    b = as_placement(planner.assign(member(1), now=0))
    union = sorted(minors(a) + minors(b))
    assert union == SEED["expected"]["seed_example"]["better"] == [0, 1, 2, 3]
    assert round(bottleneck(union), 2) == 48.33
    assert bottleneck(union) > bottleneck(SEED["expected"]["seed_example"]["worse"])
    assert a.visible_gpus == b.visible_gpus == (0, 1, 2, 3)
    # each member then takes the best pair of the union: [2, 3] (96.43), leaving [0, 1]
    assert minors(a) == [2, 3] and minors(b) == [0, 1]


def test_union_is_the_max_bottleneck_set_for_every_group_size() -> None:
    for members, per in [(1, 2), (3, 1), (2, 2), (1, 5), (3, 2)]:
        s = cluster("n")
        planner = GroupPlanner(Scheduler(s))
        got = [as_placement(planner.assign(member(i, per, replicas=members), now=0)) for i in range(members)]
        union = sorted(m for p in got for m in minors(p))
        best = best_set(MATRIX, list(range(8)), members * per)
        assert best is not None
        assert union == list(best.gpus)


def test_topology_annotation_of_a_member() -> None:
    s = cluster("host04")
    planner = GroupPlanner(Scheduler(s))
    d = planner.schedule(member(0), now=0)
    assert isinstance(d, Bind)
    p = d.members[0]
    ann = encode_annotations(member(0), p.allocation, now_ns=0, visible_gpus=list(p.visible_gpus))
    assert json.loads(ann[names.TOPOLOGY_GPU]) == {"allocatedGPUs": {"0": ["2", "3"]},
                                                   "visibleGPUs": ["0", "1", "2", "3"]}
    assert p.allocated_gpus == {0: [2, 3]}


def test_several_containers_of_a_member_split_its_gpus_in_order() -> None:
    s = cluster("n")
    planner = GroupPlanner(Scheduler(s))
    p = as_placement(planner.assign(member(0, 2, replicas=1, containers=2), now=0))
    assert p.allocated_gpus == {0: [0, 1], 1: [2, 3]}  # best 4-set [0,1,2,3]


# ------------------------------------------------------------------------------ node choice


def test_one_node_when_one_can_hold_the_group_and_the_fullest_such_node() -> None:
    s = cluster("big", "half", "small")
    take(s, "half", [4, 5, 6, 7], "x")  # 4 free
    take(s, "small", [2, 3, 4, 5, 6, 7], "y")  # 2 free
    planner = GroupPlanner(Scheduler(s))
    got = [as_placement(planner.assign(member(i), now=0)) for i in range(2)]
    assert {p.node for p in got} == {"half"}  # 4 free: holds 2 x 2 leaving 0; "big" would leave 4


def test_group_that_needs_two_nodes() -> None:
    s = cluster("a", "b", "c")
    take(s, "b", [0, 1, 2, 3], "x")  # b: 4 free; a, c: 8 free
    planner = GroupPlanner(Scheduler(s))
    got = [as_placement(planner.assign(member(i, 4, replicas=3), now=0)) for i in range(3)]
    by_node: dict[str, list[int]] = {}
    for p in got:
        by_node.setdefault(p.node, []).extend(minors(p))
    # 12 GPUs: two nodes; {a or c (8), b (4)} leaves nothing free, {a, c} would leave 4
    assert sorted(by_node) == ["a", "b"]
    assert sorted(by_node["b"]) == [4, 5, 6, 7] and sorted(by_node["a"]) == list(range(8))
    for p in got:
        assert p.visible_gpus == tuple(sorted(by_node[p.node]))


def test_fractional_members_use_the_per_node_fit() -> None:
    s = cluster("a", "b", gpus=2, bandwidth=False)
    planner = GroupPlanner(Scheduler(s))
    ref = GroupRef(name="frac", replicas=4)
    got = [as_placement(planner.assign(pod(f"f{i}", gpu(50, 4 * GiB), group=ref), now=0)) for i in range(4)]
    assert {p.node for p in got} == {"a"}  # 4 x 50% fit on one node of two GPUs
    assert got[0].visible_gpus == (0, 1)


# ------------------------------------------------------------------------------ holding the plan


def test_plan_holds_devices_and_scores_the_planned_node() -> None:
    s = cluster("a", "b")
    sch = Scheduler(s)
    planner = GroupPlanner(sch)
    first = as_placement(planner.assign(member(0, 4, replicas=2), now=0))
    assert first.node == "a"
    # nobody else can take the planned GPUs
    other = sch.place(pod("other", whole(8)))
    assert other is not None and other.node == "b"
    assert sch.place(pod("more", whole(1)), ["a"]) is None
    assert planner.planned_node(member(1, 4, replicas=2), ["a", "b"], now=1) == "a"
    out = planner.filter(member(1, 4, replicas=2), ["a", "b"], now=1)
    assert out.passed == ["a"] and "planned on node a" in out.failed["b"]
    keys = sorted(k for k in s.pods if "#plan#" in k)
    assert keys == ["default/job#plan#0", "default/job#plan#1"]
    assert [s.pods[k].group for k in keys] == ["default/job", "default/job"]  # holds, not pods


def test_members_take_their_planned_devices_and_placeholders_turn_into_them() -> None:
    s = cluster("a")
    planner = GroupPlanner(Scheduler(s))
    planned = [as_placement(planner.assign(member(i), now=0)) for i in range(2)]
    for i, p in enumerate(planned):
        d = planner.claim(member(i), "a", now=1)
        assert isinstance(d, Bind) and d.members[0].allocation == p.allocation
    assert not [k for k in s.pods if "#plan#" in k]
    assert sorted(s.pods) == ["default/job-0", "default/job-1"]
    assert all(r.phase == "bound" for r in s.pods.values())


def test_members_that_differ_are_refused() -> None:
    s = cluster("a")
    planner = GroupPlanner(Scheduler(s))
    assert isinstance(planner.assign(member(0, 2), now=0), MemberPlacement)
    d = planner.assign(member(1, 3), now=0)
    assert isinstance(d, Refuse) and "must ask for the same resources" in d.reason
    d2 = planner.assign(member(1, 2, replicas=3), now=0)
    assert isinstance(d2, Refuse) and "replica" in d2.reason


def test_more_members_than_replicas_are_refused() -> None:
    s = cluster("a")
    planner = GroupPlanner(Scheduler(s))
    for i in range(2):
        assert isinstance(planner.schedule(member(i), now=0), Bind)
    d = planner.assign(member(2), now=0)
    assert isinstance(d, Refuse) and "already has its 2 members" in d.reason


# ------------------------------------------------------------------------------ re-planning


def test_node_deleted_before_any_member_binds_replans_the_whole_group() -> None:
    s = cluster("a", "b", "c")
    take(s, "c", [0, 1, 2, 3], "x")
    planner = GroupPlanner(Scheduler(s))
    first = as_placement(planner.assign(member(0, 2, replicas=2), now=0))
    assert first.node == "c"
    s.remove_node("c")
    again = as_placement(planner.assign(member(1, 2, replicas=2), now=1))
    assert again.node == "a"
    plan = planner.plans["default/job"]
    assert [sl.node for sl in plan.slots] == ["a", "a"]  # the whole group moved together
    assert not any(r.allocation.node == "c" for k, r in s.pods.items() if "#plan#" in k)


def test_devices_taken_from_a_plan_replan_only_the_member_once_one_is_bound() -> None:
    s = cluster("a", "b")
    sch = Scheduler(s)
    planner = GroupPlanner(sch)
    assert isinstance(planner.schedule(member(0, 4, replicas=2), now=0), Bind)
    slot = planner.plans["default/job"].slots[1]
    assert slot.node == "a" and planner.phase(slot) == "planned"
    # the planned GPUs turn unhealthy (another way to lose them: a pod bound outside devshare)
    add_node(s, "a", 8, bandwidth=MATRIX, unhealthy=[m for _, g in slot.allocation.grants()  # type: ignore[union-attr]
                                                     for m in [g.minor]])
    d = planner.schedule(member(1, 4, replicas=2), now=1)
    assert isinstance(d, Bind) and d.members[0].node == "b"
    assert s.pods["default/job-0"].allocation.node == "a"  # the bound member stays


def test_node_missing_from_the_members_candidates_replans() -> None:
    s = cluster("a", "b")
    planner = GroupPlanner(Scheduler(s))
    assert as_placement(planner.assign(member(0), now=0)).node == "a"
    p = as_placement(planner.assign(member(1), ["b"], now=0))
    assert p.node == "b"
    assert {sl.node for sl in planner.plans["default/job"].slots} == {"b"}


def test_plain_group_member_bind_failure_returns_to_the_plan() -> None:
    s = cluster("a")
    planner = GroupPlanner(Scheduler(s))
    d = planner.schedule(member(0), now=0)
    assert isinstance(d, Bind)
    assert planner.bind_failed("default/job-0", now=1)
    assert "default/job-0" not in s.pods and "default/job#plan#0" in s.pods
    again = planner.schedule(member(0), now=2)
    assert isinstance(again, Bind) and again.members[0].allocation == d.members[0].allocation


def test_expired_plan_releases_placeholders_and_later_members_are_placed_alone() -> None:
    s = cluster("a", "b")
    before = usage_key(s)
    planner = GroupPlanner(Scheduler(s), ttl=30)
    assert isinstance(planner.schedule(member(0, 4, replicas=3), now=0), Bind)
    assert planner.expire(31) == ["default/job"]
    assert not [k for k in s.pods if "#plan#" in k]
    d = planner.schedule(member(1, 4, replicas=3), now=40)
    assert isinstance(d, Bind) and len(planner.plans["default/job"].slots) == 1
    for k in ("default/job-0", "default/job-1"):
        planner.lifecycle.release(k)
    assert usage_key(s) == before


def test_restart_reads_bound_members_from_the_state() -> None:
    s = cluster("a", "b")
    planner = GroupPlanner(Scheduler(s))
    d = planner.schedule(member(0, 4, replicas=2), now=0)
    assert isinstance(d, Bind)
    rebuilt = cluster("a", "b")
    occupy(rebuilt, member(0, 4, replicas=2), d.members[0].allocation)
    fresh = GroupPlanner(Scheduler(rebuilt))
    p = as_placement(fresh.assign(member(1, 4, replicas=2), now=5))
    assert len(fresh.plans["default/job"].slots) == 1  # only the member is planned
    assert p.visible_gpus == tuple(sorted(minors(d.members[0]) + (minors(p) if p.node == "a" else [])))


# ------------------------------------------------------------------------------ gangs


def test_gang_binds_nobody_until_min_available_then_everybody() -> None:
    s = cluster("a", "b")
    planner = GroupPlanner(Scheduler(s))
    for i in range(2):
        d = planner.schedule(member(i, 4, replicas=3, gang=3), now=i)
        assert isinstance(d, Wait)
        assert f"{i + 1} of 3 members" in d.reason
        assert not may_bind(planner, f"default/job-{i}")
    assert not any(r.phase == "bound" for r in s.pods.values())
    d = planner.schedule(member(2, 4, replicas=3, gang=3), now=3)
    assert isinstance(d, Bind)
    assert [m.pod for m in d.members] == ["default/job-2", "default/job-0", "default/job-1"]
    assert all(may_bind(planner, f"default/job-{i}") for i in range(3))
    # a waiting member retrying its bind now binds alone (already bound: same answer)
    again = planner.claim(member(0, 4, replicas=3, gang=3), d.members[1].node, now=4)
    assert isinstance(again, Bind) and again.members[0].pod == "default/job-0"
    assert not planner.bind_failed("default/job-0", now=5)  # a gang's decision stands


def test_gang_that_cannot_fit_holds_nothing() -> None:
    s = cluster("a", "b")
    before = usage_key(s)
    planner = GroupPlanner(Scheduler(s))
    d = planner.schedule(member(0, 8, replicas=3, gang=3), now=0)
    assert isinstance(d, Refuse) and "2 of 3 members fit" in d.reason
    assert usage_key(s) == before and not s.pods


def test_gang_that_never_completes_releases_everything_when_it_expires() -> None:
    s = cluster("a", "b")
    before = usage_key(s)
    planner = GroupPlanner(Scheduler(s), ttl=60)
    for i in range(2):
        assert isinstance(planner.schedule(member(i, 4, replicas=3, gang=3), now=10 * i), Wait)
    # asking again does not keep the plan alive
    for t in (20, 40, 60):
        assert isinstance(planner.claim(member(0, 4, replicas=3, gang=3), now=t), Wait)
    assert planner.expire(69) == []
    assert planner.expire(70) == ["default/job"]  # 60 s after the last new member (at 10)
    assert usage_key(s) == before and not s.pods


def test_gang_plan_invalidated_while_waiting_is_made_again() -> None:
    s = cluster("a", "b", "c")
    planner = GroupPlanner(Scheduler(s))
    d0 = planner.schedule(member(0, 4, replicas=2, gang=2), now=0)
    assert isinstance(d0, Wait) and d0.node == "a"
    s.remove_node("a")
    d1 = planner.schedule(member(1, 4, replicas=2, gang=2), now=1)
    assert isinstance(d1, Wait)  # the whole gang moved; member 0 must come again
    d0 = planner.claim(member(0, 4, replicas=2, gang=2), "a", now=2)
    assert isinstance(d0, Wait) and d0.node == "b"
    d0 = planner.claim(member(0, 4, replicas=2, gang=2), "b", now=3)
    assert isinstance(d0, Bind) and {m.node for m in d0.members} == {"b"}
    assert len(d0.members) == 2


def test_planned_devices_taken_by_a_pod_bound_elsewhere_replan_the_group() -> None:
    # a pod bound by another scheduler lands on planned GPUs (its annotation is the truth)
    s = cluster("a", "b")
    planner = GroupPlanner(Scheduler(s))
    p0 = as_placement(planner.assign(member(0, 4, replicas=2), now=0))
    assert p0.node == "a"
    take(s, "a", [minors(p0)[0]], "intruder")
    p1 = as_placement(planner.assign(member(1, 4, replicas=2), now=1))
    plan = planner.plans["default/job"]
    # nothing was bound yet: the whole group moves to "b", where 2 x 4 GPUs still fit together
    assert p1.node == "b" and [sl.node for sl in plan.slots] == ["b", "b"]
    assert as_placement(planner.assign(member(0, 4, replicas=2), now=2)).node == "b"
