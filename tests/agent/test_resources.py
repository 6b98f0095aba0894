"""The extended resources a node advertises (:mod:`devshare.agent.resources`): the fake ids each
device plugin lists, which device each id stands for, and the names advertised through the node status."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.agent.fake import FakeBackend
from devshare.agent.inventory import Gpu, Inventory, OtherDevice
from devshare.agent.resources import (
    PLUGIN_RESOURCES,
    STATUS_RESOURCES,
    PluginResource,
    fake_count,
    fake_devices,
    owners,
    resource_named,
    status_resources,
)
from devshare.model.dialects import aliyun, koordinator_names, mgpu, nvidia
from devshare.model.quantity import MIB
from support.agent import GIB, write_fake


def res(name: str) -> PluginResource:
    r = resource_named(name)
    assert r is not None
    return r


def node(*memories: int, unhealthy: tuple[int, ...] = (), rdma: int = 0) -> Inventory:
    gpus = tuple(Gpu(minor=i, uuid=f"GPU-{i}", memory=m, numa_node=i % 2, healthy=i not in unhealthy)
                 for i, m in enumerate(memories))
    others = tuple(OtherDevice(type="rdma", minor=k, id=f"mlx5_{k}") for k in range(rdma))
    return Inventory(gpus=gpus, others=others)


def test_owners_match_the_listed_ids(tmp_path: Path) -> None:
    """The id -> device map used for a pick is the one the plugins list (without building the list)."""
    inv = FakeBackend(write_fake(tmp_path / "n.yaml", gpus=2, memory="1Gi",
                                 rdma=[{"id": "mlx5_0", "paths": ["/dev/infiniband/uverbs0"]}]), node="n1").discover()
    for r in PLUGIN_RESOURCES:
        owner = owners(r, inv)
        assert all(owner(d.id) == d.device_id for d in fake_devices(r, inv)), r.name
        assert owner("9-1") == owner("GPU-nope") == ""


def test_whole_device_names_list_each_device_once_by_its_own_id() -> None:
    inv = node(GIB, GIB, unhealthy=(1,))
    got = fake_devices(res(nvidia.NVIDIA_GPU), inv)
    assert [(d.id, d.device_id, d.healthy, d.numa_node) for d in got] == [
        ("GPU-0", "GPU-0", True, 0), ("GPU-1", "GPU-1", False, 1)]


def test_percent_names_list_100_ids_per_card_tagged_by_minor() -> None:
    got = fake_devices(res(koordinator_names.KOORD_GPU_CORE), node(GIB, GIB, unhealthy=(0,)))
    assert len(got) == 200
    assert got[0].id == "0-0" and got[99].id == "0-99" and got[100].id == "1-0"
    assert {d.device_id for d in got[:100]} == {"GPU-0"} and not any(d.healthy for d in got[:100])
    assert all(d.healthy for d in got[100:])


def test_mib_names_list_one_id_per_mib_of_each_card() -> None:
    got = fake_devices(res(aliyun.ALIYUN_GPU_MEM), node(3 * MIB, 2 * MIB + MIB // 2))
    assert [d.id for d in got] == ["0-0", "0-1", "0-2", "1-0", "1-1"]  # a part MiB is not listed


def test_rdma_ids_are_tagged_by_type_and_minor_and_gpus_are_not_listed() -> None:
    got = fake_devices(res(koordinator_names.KOORD_RDMA), node(GIB, rdma=2))
    assert len(got) == 200
    assert (got[0].id, got[0].device_id, got[0].numa_node) == ("rdma0-0", "mlx5_0", -1)
    assert got[100].id == "rdma1-0"
    assert fake_devices(res(koordinator_names.KOORD_FPGA), node(GIB, rdma=2)) == []


@settings(deadline=None)  # no test depends on machine speed
@given(st.lists(st.integers(0, 64 * MIB), max_size=4), st.integers(0, 3))
def test_the_count_is_the_number_of_ids_listed(memories: list[int], rdma: int) -> None:
    inv = node(*memories, rdma=rdma)
    for r in PLUGIN_RESOURCES:
        listed = fake_devices(r, inv)
        assert fake_count(r, inv) == len(listed), r.name
        assert len({d.id for d in listed}) == len(listed), r.name  # ids are unique
        owner = owners(r, inv)
        assert all(owner(d.id) == d.device_id for d in listed), r.name


def test_status_names_count_memory_in_their_unit_and_allocatable_only_healthy_cards() -> None:
    inv = node(16 * GIB, 16 * GIB + 1, unhealthy=(1,))
    capacity, allocatable = status_resources(inv)
    assert set(capacity) == set(allocatable) == set(STATUS_RESOURCES)
    assert capacity[koordinator_names.KOORD_GPU_MEMORY] == str(32 * GIB + 1)
    assert allocatable[koordinator_names.KOORD_GPU_MEMORY] == str(16 * GIB)
    assert capacity[mgpu.MGPU_MEMORY] == str(32 * 1024)  # MiB, rounded down
    assert allocatable[mgpu.MGPU_MEMORY] == str(16 * 1024)


def test_plugin_names_that_fell_back_are_counted_in_their_own_unit() -> None:
    inv = node(2 * GIB, 2 * GIB, unhealthy=(0,), rdma=1)
    capacity, allocatable = status_resources(
        inv, extra=(aliyun.ALIYUN_GPU_MEM, nvidia.NVIDIA_GPU, koordinator_names.KOORD_RDMA, "example.com/unknown"))
    assert (capacity[aliyun.ALIYUN_GPU_MEM], allocatable[aliyun.ALIYUN_GPU_MEM]) == ("4096", "2048")
    assert (capacity[nvidia.NVIDIA_GPU], allocatable[nvidia.NVIDIA_GPU]) == ("2", "1")
    assert (capacity[koordinator_names.KOORD_RDMA], allocatable[koordinator_names.KOORD_RDMA]) == ("100", "100")
    assert "example.com/unknown" not in capacity  # not a plugin name: nothing to count


def test_no_gpus_advertise_zero_memory() -> None:
    capacity, allocatable = status_resources(Inventory())
    assert capacity == allocatable == {name: "0" for name in STATUS_RESOURCES}


def test_each_plugin_name_has_its_own_socket() -> None:
    assert resource_named("example.com/gpu") is None
    sockets = [r.socket_name() for r in PLUGIN_RESOURCES]
    assert len(set(sockets)) == len(sockets)
    assert res(nvidia.NVIDIA_GPU).socket_name() == "devshare-nvidia-gpu.sock"


@pytest.mark.parametrize(("per_device", "memory", "units"), [("one", GIB, 1), ("percent", GIB, 100),
                                                             ("mib", GIB + MIB - 1, 1024)])
def test_units_per_device(per_device: str, memory: int, units: int) -> None:
    r = PluginResource(name="x", device_type="gpu", per_device=per_device, short="x")
    assert r.units(memory) == units
