"""GPU selection by pod annotation (HAMi's ``nvidia.com/use-gpuuuid``, ``nouse-gpuuuid``, ``use-gputype``,
``nouse-gputype``): enforced per card at filter (the mask, the reasons, seed 000's DFS) and at bind
(reserve's check), with a node-level reason when too few GPUs are left."""

from __future__ import annotations

import pytest

from devshare.engine.records import Conflict
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.request import GpuSelection
from support.cluster import GiB, add_node, gpu, hold, occupy, outcome, pod, whole

A100 = "NVIDIA A100-SXM4-80GB"
T4 = "Tesla T4"


def cluster() -> Scheduler:
    state = ClusterState()
    add_node(state, "a", gpus=4, model=A100)
    add_node(state, "b", gpus=4, model=T4)
    return Scheduler(state)


def sel(**kw: tuple[str, ...]) -> GpuSelection:
    return GpuSelection(**kw)


def test_types_match_case_insensitive_substrings() -> None:
    s = cluster()
    out = outcome(s, pod("p", gpu(30, GiB), gpu_selection=sel(use_types=("a100",))))
    assert out.passed == ["a"]
    assert out.unresolvable["b"] == (
        "the pod's GPU selection (nvidia.com/use-gputype: a100) allows 0 of this node's 4 GPU(s), a container asks "
        "for 1: gpu 0 (GPU-b-0) is of type Tesla T4, not one of its nvidia.com/use-gputype; gpu 1 (GPU-b-1) is of "
        "type Tesla T4, not one of its nvidia.com/use-gputype; gpu 2 (GPU-b-2) is of type Tesla T4, not one of its "
        "nvidia.com/use-gputype; ...")
    assert outcome(s, pod("p", gpu(30, GiB), gpu_selection=sel(avoid_types=("T4", "V100")))).passed == ["a"]
    assert outcome(s, pod("p", gpu(30, GiB), gpu_selection=sel(use_types=("Tesla", "A100")))).passed == ["a", "b"]


def test_ids_pick_the_cards() -> None:
    s = cluster()
    placed = s.place(pod("p", gpu(30, GiB), gpu_selection=sel(use_ids=("GPU-b-2",))))
    assert placed is not None and placed.node == "b"
    assert [d.minor for d in placed.allocation.containers[0].devices] == [2]
    two = s.place(pod("p", whole(2), gpu_selection=sel(avoid_ids=("GPU-a-0", "GPU-a-1", "GPU-b-0"))))
    assert two is not None and two.node == "a"
    assert [d.minor for d in two.allocation.containers[0].devices] == [2, 3]
    out = outcome(s, pod("p", whole(3), gpu_selection=sel(avoid_ids=("GPU-a-0", "GPU-a-1"))))
    assert out.passed == ["b"]
    assert out.unresolvable["a"].startswith("the pod's GPU selection (nvidia.com/nouse-gpuuuid: GPU-a-0,GPU-a-1) "
                                            "allows 2 of this node's 4 GPU(s), a container asks for 3")


def test_a_card_left_out_is_named_when_the_others_are_full() -> None:
    s = cluster()
    state = s.state
    for minor in (1, 2, 3):  # a's other cards are full
        occupy(state, pod(f"busy{minor}", whole()), PodAllocation(node="a", containers=(
            ContainerAllocation(name="c0", devices=(DeviceGrant(type="gpu", minor=minor, core_milli=1000,
                                                                memory=16 * GiB, memory_ratio_milli=1000),)),)))
    out = outcome(s, pod("p", gpu(30, GiB), gpu_selection=sel(avoid_ids=("GPU-a-0",))), ["a"])
    assert "gpu 0: left out by the pod's GPU selection" in out.failed["a"]
    assert "gpu 1: in use" in out.failed["a"] or "gpu 1: 0% compute free" in out.failed["a"]


def test_several_containers_search_only_the_allowed_cards() -> None:
    s = cluster()
    p = pod("p", gpu(60, GiB), gpu(60, GiB), gpu(60, GiB), gpu_selection=sel(use_ids=("GPU-a-1", "GPU-a-3")))
    out = outcome(s, p)
    assert out.passed == [] and "no combination of gpu devices fits every container" in out.failed["a"]
    p2 = pod("p", gpu(40, GiB), gpu(40, GiB), gpu(40, GiB), gpu_selection=sel(use_ids=("GPU-a-1", "GPU-a-3")))
    placed = s.place(p2)
    assert placed is not None and placed.node == "a"
    assert {d.minor for c in placed.allocation.containers for d in c.devices} <= {1, 3}


def test_reserve_refuses_a_card_the_selection_leaves_out() -> None:
    s = cluster()
    p = pod("p", gpu(30, GiB), gpu_selection=sel(avoid_types=("T4",)))
    alloc = PodAllocation(node="b", containers=(ContainerAllocation(name="c0", devices=(
        DeviceGrant(type="gpu", minor=0, id="GPU-b-0", core_milli=300, memory=GiB),)),))
    with pytest.raises(Conflict, match="gpu 0: left out by the pod's GPU selection"):
        hold(s.state, p, alloc, ttl=60)
    assert s.allocate_on(p, "b").startswith("the pod's GPU selection")  # type: ignore[union-attr]


def test_a_node_label_gives_the_type_of_cards_without_a_model() -> None:
    state = ClusterState()
    add_node(state, "l", gpus=1, labels={"devshare.io/gpu-model": "H100"})
    s = Scheduler(state)
    assert outcome(s, pod("p", gpu(30, GiB), gpu_selection=sel(use_types=("h100",)))).passed == ["l"]
    assert outcome(s, pod("p", gpu(30, GiB), gpu_selection=sel(avoid_types=("H100",)))).passed == []
