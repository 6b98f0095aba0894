"""A group's plan and the planner's decisions (engine/groups/plan.py): a gang's quorum, what makes two
members differ and how the refusal says it, a plan's slots and placeholder keys, and a member's GPUs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from devshare.engine.groups.plan import PLAN, GroupPlan, MemberPlacement, Slot, differs, quorum_of
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.request import DeviceRequest, GroupRef, PodRequest
from support.cluster import gpu, pod, whole


def member(name: str, *asks: DeviceRequest, replicas: int = 2, gang: bool = False, min_available: int | None = None,
           **kw: object) -> PodRequest:
    ref = GroupRef(name="job", replicas=replicas, gang_name="job" if gang else None, min_available=min_available)
    return pod(name, *(asks or (whole(2),)), group=ref, **kw)


def test_a_plain_group_needs_one_member_and_a_gang_its_min_available() -> None:
    assert quorum_of(pod("solo", whole())) == 1
    assert quorum_of(member("a", replicas=4)) == 1
    assert quorum_of(member("a", replicas=4, gang=True)) == 4  # no min-available: every replica
    assert quorum_of(member("a", replicas=4, gang=True, min_available=3)) == 3
    assert quorum_of(member("a", replicas=4, gang=True, min_available=9)) == 4  # never more than the replicas


@given(st.integers(1, 64), st.one_of(st.none(), st.integers(-5, 100)))
def test_a_gang_s_quorum_is_between_one_and_its_replicas(replicas: int, min_available: int | None) -> None:
    q = quorum_of(member("a", replicas=replicas, gang=True, min_available=min_available))
    assert 1 <= q <= replicas
    if min_available is not None and 1 <= min_available <= replicas:
        assert q == min_available


def test_identical_members_do_not_differ_whatever_their_names() -> None:
    assert differs(member("a", gpu(30, count=2)), member("b", gpu(30, count=2))) is None


def test_a_member_that_differs_is_told_in_what_and_why_it_matters() -> None:
    first = member("a", whole(2))
    assert differs(member("b", whole(4)), first) == (
        "pod default/b differs from default/a in containers and device requests; every member of group job "
        "must ask for the same resources (members are planned as identical pods)")
    got = differs(member("b", whole(2), cpu_milli=500, gpu_models=("A100",), replicas=3), first)
    assert got is not None
    assert got.startswith("pod default/b differs from default/a in CPU/memory, GPU model or compute policy, "
                          "replica/min-available count; ")
    gang = differs(member("b", whole(2), gang=True), first)
    assert gang is not None and " in replica/min-available count; " in gang


def test_a_plan_s_keys_and_slots() -> None:
    plan = GroupPlan(namespace="ns", name="job", template=member("a"), replicas=2, quorum=1, expires_at=9.0,
                     slots=[Slot(0, member="ns/a"), Slot(1)])
    assert plan.key == "ns/job"
    assert plan.placeholder(1) == f"ns/job{PLAN}1" and plan.placeholder(0) != plan.placeholder(1)
    assert plan.slot_of("ns/a") is plan.slots[0]
    assert plan.slot_of("ns/b") is None


def test_a_member_s_allocated_gpus_are_per_container_minors() -> None:
    gpus = (DeviceGrant(type="gpu", minor=3), DeviceGrant(type="gpu", minor=1))
    alloc = PodAllocation(node="n", containers=(
        ContainerAllocation(name="rdma-only", devices=(DeviceGrant(type="rdma", minor=0),)),
        ContainerAllocation(name="main", devices=(*gpus, DeviceGrant(type="rdma", minor=1))),
        ContainerAllocation(name="side"),
    ))
    placed = MemberPlacement(pod="ns/a", node="n", allocation=alloc, visible_gpus=(1, 3))
    assert placed.allocated_gpus == {1: [3, 1]}
