"""GetPreferredAllocation: kubelet is asked to pick ids of the cards the container's allocation names,
as many of each as its share, so its checkpoint and pod-resources API tell the truth."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from devshare.agent.deviceplugin.allocator import Allocator
from devshare.agent.deviceplugin.preferred import preferred_ids
from devshare.agent.fake import FakeBackend
from devshare.agent.inventory import Inventory
from devshare.agent.resources import PluginResource, fake_devices, resource_named
from devshare.model.dialects import aliyun, nvidia
from devshare.model.dialects.koordinator_names import KOORD_GPU_CORE, KOORD_GPU_MEMORY_RATIO
from support.agent import GIB, MemoryClient, gpu, pod, write_fake


def res(name: str) -> PluginResource:
    r = resource_named(name)
    assert r is not None
    return r


def inventory(tmp_path: Path, gpus: int = 4, memory: str = "4Gi") -> Inventory:
    return FakeBackend(write_fake(tmp_path / "n.yaml", gpus=gpus, memory=memory), node="n1").discover()


def cards(ids: list[str]) -> list[int]:
    return sorted(int(i.split("-")[0]) for i in ids)


def test_whole_gpus_are_the_granted_cards(tmp_path: Path) -> None:
    inv = inventory(tmp_path)
    u = [g.uuid for g in inv.gpus]
    picked = preferred_ids(res(nvidia.NVIDIA_GPU), inv, [gpu(1, u[1]), gpu(3, u[3])], u, [], 2)
    assert sorted(picked) == sorted([u[1], u[3]])


def test_percent_ids_follow_each_cards_share_in_the_resources_dimension(tmp_path: Path) -> None:
    inv = inventory(tmp_path)
    u = [g.uuid for g in inv.gpus]
    available = [d.id for d in fake_devices(res(KOORD_GPU_CORE), inv)]
    grants = [gpu(0, u[0], core=300, ratio=200), gpu(2, u[2], core=300, ratio=400)]
    assert cards(preferred_ids(res(KOORD_GPU_CORE), inv, grants, available, [], 60)) == [0] * 30 + [2] * 30
    assert cards(preferred_ids(res(KOORD_GPU_MEMORY_RATIO), inv, grants, available, [], 60)) == [0] * 20 + [2] * 40
    # an ask that does not mirror the allocation: split in proportion
    assert cards(preferred_ids(res(KOORD_GPU_CORE), inv, grants, available, [], 10)) == [0] * 5 + [2] * 5


def test_memory_in_mib_and_ids_to_include(tmp_path: Path) -> None:
    inv = inventory(tmp_path, gpus=2, memory="1Gi")
    u = [g.uuid for g in inv.gpus]
    mem = res(aliyun.ALIYUN_GPU_MEM)
    available = [d.id for d in fake_devices(mem, inv)]
    picked = preferred_ids(mem, inv, [gpu(1, u[1], core=250, memory=GIB // 4)], available, ["0-7"], 256)
    assert picked[0] == "0-7" and cards(picked) == [0] + [1] * 255  # the reused id counts, the rest on card 1


def test_without_a_container_kubelets_own_pick(tmp_path: Path) -> None:
    inv = inventory(tmp_path)
    assert preferred_ids(res(KOORD_GPU_CORE), inv, [], ["3-1", "0-1", "1-1"], ["1-1"], 2) == ["1-1", "3-1"]


@given(size=st.integers(0, 60), cores=st.lists(st.integers(1, 1000), min_size=1, max_size=3),
       free=st.integers(0, 399), must=st.integers(0, 3))
def test_always_size_distinct_offered_ids(size: int, cores: list[int], free: int, must: int) -> None:
    """kubelet keeps only offered ids and needs ``size`` of them: the answer is always that."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        inv = inventory(Path(d))
    u = [g.uuid for g in inv.gpus]
    everything = [x.id for x in fake_devices(res(KOORD_GPU_CORE), inv)]
    available = everything[free:] + everything[:free]
    size = min(size, len(available))
    grants = [gpu(i, u[i], core=c) for i, c in enumerate(cores)]
    include = available[:must]
    picked = preferred_ids(res(KOORD_GPU_CORE), inv, grants, available, include, size)
    assert len(picked) == size == len(set(picked))
    assert set(picked) <= set(available) and set(include[:size]) <= set(picked)


def test_the_allocator_prefers_the_cards_of_the_container_the_call_is_for(tmp_path: Path) -> None:
    inv = inventory(tmp_path)
    u = [g.uuid for g in inv.gpus]
    p = pod("p", "n1", [("a", {nvidia.NVIDIA_GPU: 1}, [gpu(2, u[2])]), ("b", {nvidia.NVIDIA_GPU: 2},
                                                                     [gpu(0, u[0]), gpu(3, u[3])])])
    a = Allocator("n1", MemoryClient([p]), lambda: inv, resources=[nvidia.NVIDIA_GPU])
    assert a.preferred(res(nvidia.NVIDIA_GPU), [(u, [], 1)]) == [[u[2]]]
    assert a.preferred(res(nvidia.NVIDIA_GPU), [(u, [], 1)]) == [[u[2]]]  # nothing recorded: still a
    a.allocate(res(nvidia.NVIDIA_GPU), [[u[2]]])
    assert sorted(a.preferred(res(nvidia.NVIDIA_GPU), [(u, [], 2)])[0]) == sorted([u[0], u[3]])
    # a call no pod waits for: kubelet's own pick (its Allocate is refused, saying why)
    assert a.preferred(res(nvidia.NVIDIA_GPU), [(u, [], 3)]) == [u[:3]]

