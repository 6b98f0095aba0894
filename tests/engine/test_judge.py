"""Whether an allocation may be counted (engine/judge.py): the reserve's check, every rule of the
filter's predicate with a pod's own record left out when asked, and the rule for allocations already
written on pods, which weighs only a card's capacity."""

from __future__ import annotations

import msgspec

from devshare.engine import judge
from devshare.engine.state import ClusterState
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.device import DeviceInfo, NodeDevices
from devshare.model.node import parse_node
from devshare.model.request import ContainerRequest, DeviceRequest, PodRequest
from support.cluster import GiB, add_node, gpu, hold, occupy, pod


def one_card(node: str, minor: int, core: int, memory: int = 0) -> PodAllocation:
    return PodAllocation(node=node, containers=(ContainerAllocation(name="c0", devices=(
        DeviceGrant(type="gpu", minor=minor, id=f"GPU-{node}-{minor}", core_milli=core, memory=memory),)),))


def test_a_pods_own_record_is_not_counted_twice_when_it_is_judged_again() -> None:
    """At bind the claim check asks whether a pod's allocation fits ``ignore``-ing its own assumed
    record: the record's CPU and memory were counted as well as its devices (on a node whose CPU is
    tracked, a pod that took the last cores was refused at its own bind)."""
    s = ClusterState()
    s.upsert_node(parse_node({"metadata": {"name": "a"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}},
                             track_resources=True))
    s.set_devices(NodeDevices(node="a", devices=(DeviceInfo(type="gpu", minor=0, id="GPU-a-0", memory=16 * GiB),)))
    pod_ = PodRequest(namespace="ns", name="p", cpu_milli=3000, memory_bytes=6 * GiB,
                      containers=(ContainerRequest(name="main", devices=(DeviceRequest(type="gpu", core_milli=500),)),))
    alloc = PodAllocation(node="a", containers=(ContainerAllocation(name="main", devices=(
        DeviceGrant(type="gpu", minor=0, id="GPU-a-0", core_milli=500, memory=0),)),))
    hold(s, pod_, alloc)
    assert judge.why_not(s, s.pods, pod_, alloc, ignore=pod_.key) is None
    assert judge.why_not(s, s.pods, pod_, alloc) is not None  # counted again: 6 of 4 cores


def test_why_not_names_the_node_or_the_card_that_refuses() -> None:
    s = ClusterState()
    add_node(s, "a", 2, unhealthy=[1])
    add_node(s, "b", 1)
    occupy(s, pod("held", gpu(70)), one_card("b", 0, 700))
    p = pod("p", gpu(50))
    assert judge.why_not(s, s.pods, p, one_card("ghost", 0, 500)) == "node ghost is not known"
    assert "gpu 1" in (judge.why_not(s, s.pods, p, one_card("a", 1, 500)) or "")  # unhealthy
    assert "gpu 7" in (judge.why_not(s, s.pods, p, one_card("a", 7, 500)) or "")  # absent
    assert "gpu 0" in (judge.why_not(s, s.pods, p, one_card("b", 0, 500)) or "")  # 30% left, 50% asked
    assert judge.why_not(s, s.pods, p, one_card("a", 0, 500)) is None
    s.upsert_node(msgspec.structs.replace(s.nodes["a"], unschedulable=True))  # cordoned
    assert judge.why_not(s, s.pods, p, one_card("a", 0, 500)) == "node a is unschedulable"


def test_overbooking_weighs_capacity_alone() -> None:
    """An allocation already written on a pod is refused only when it books a card beyond its compute
    or memory: an unhealthy card, or one past its containers, is no reason (the pod runs there)."""
    s = ClusterState(max_containers_per_device=1)
    add_node(s, "a", 2, memory=8 * GiB, unhealthy=[1])
    occupy(s, pod("first", gpu(60, 4 * GiB)), one_card("a", 0, 600, 4 * GiB))
    assert judge.overbooking(s, s.pods, one_card("a", 1, 1000, 8 * GiB)) is None  # unhealthy: counted anyway
    assert judge.overbooking(s, s.pods, one_card("a", 0, 400, 4 * GiB)) is None  # a second container, full card
    reason = judge.overbooking(s, s.pods, one_card("a", 0, 500, GiB))
    assert reason is not None and "would hold 110% compute" in reason
    assert judge.overbooking(s, s.pods, one_card("a", 0, 900, GiB), ignore="default/first") is None
    assert judge.overbooking(s, s.pods, one_card("ghost", 0, 5000)) is None  # nothing to judge against
