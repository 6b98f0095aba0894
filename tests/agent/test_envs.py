"""What a container is handed for its allocation (:mod:`devshare.agent.envs`): the environment the NVIDIA
runtime, HAMi-core and Aliyun's workloads read, and the device files of RDMA/FPGA devices."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.agent.envs import container_devices, memory_limit, other_devices
from devshare.agent.inventory import Gpu, Inventory, OtherDevice
from devshare.agent.matching import AllocateError, PendingPod, pending_pod
from devshare.model import names
from devshare.model.allocation import DeviceGrant
from devshare.model.dialects import aliyun
from devshare.model.dialects.nvidia import NVIDIA_GPU
from support.agent import GIB, gpu, pod

INV = Inventory(
    gpus=tuple(Gpu(minor=i, uuid=f"GPU-{i}", memory=16 * GIB) for i in range(4)),
    others=tuple(OtherDevice(type="rdma", minor=k, id=f"mlx5_{k}",
                             paths=(f"/dev/infiniband/uverbs{k}", "/dev/infiniband/rdma_cm")) for k in range(2)),
)


def pending(containers: list[tuple[str, dict[str, Any], list[DeviceGrant]]], **kw: Any) -> PendingPod:
    p = pending_pod(pod("p", "n1", containers, **kw), node="n1",
                    resources=(NVIDIA_GPU, aliyun.ALIYUN_GPU_MEM, "koordinator.sh/rdma"))
    assert p is not None
    return p


def envs(p: PendingPod, container: str = "main") -> dict[str, str]:
    return container_devices(p, container, INV, names.GPU).envs


def test_whole_cards_get_only_their_uuids() -> None:
    p = pending([("main", {NVIDIA_GPU: 2}, [gpu(2, "GPU-2"), gpu(0, "GPU-0")])])
    assert envs(p) == {"NVIDIA_VISIBLE_DEVICES": "GPU-2,GPU-0"}  # in the grants' order


def test_a_share_gets_its_limits_per_card_for_devshare_and_hami_core() -> None:
    p = pending([("main", {}, [gpu(1, "GPU-1", core=300, memory=6 * GIB), gpu(3, "GPU-3", core=500, ratio=250)])])
    assert envs(p) == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-1,GPU-3",
        "DEVSHARE_GPU_MEMORY_LIMIT": f"{6 * GIB},{4 * GIB}",
        "DEVSHARE_GPU_CORE_LIMIT": "30,50",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "6144m",
        "CUDA_DEVICE_MEMORY_LIMIT_1": "4096m",
        "CUDA_DEVICE_SM_LIMIT": "50",
    }


def test_a_whole_cards_compute_with_part_of_its_memory_is_a_share() -> None:
    p = pending([("main", {}, [gpu(0, "GPU-0", core=1000, memory=8 * GIB)])])
    assert envs(p)["DEVSHARE_GPU_MEMORY_LIMIT"] == str(8 * GIB)
    assert envs(p)["CUDA_DEVICE_SM_LIMIT"] == "100"


@settings(deadline=None)  # no test depends on machine speed
@given(core=st.integers(1, 1000), ratio=st.integers(0, 1000), memory=st.integers(0, 32 * GIB))
def test_the_memory_limit_is_the_bytes_else_the_ratio_else_the_compute_share(core: int, ratio: int,
                                                                              memory: int) -> None:
    g = DeviceGrant(type=names.GPU, minor=0, id="GPU-0", core_milli=core, memory=memory, memory_ratio_milli=ratio)
    got = memory_limit(g, INV)
    expected = memory or 16 * GIB * (ratio or core) // 1000
    assert got == expected
    assert 0 <= got <= (memory or 16 * GIB)


def test_a_group_pods_container_sees_the_groups_cards_and_runs_on_its_own() -> None:
    topo = {"allocatedGPUs": {"1": [3]}, "visibleGPUs": [2, 3]}
    p = pending([("head", {}, [gpu(2, "GPU-2")]), ("worker", {}, [gpu(3, "GPU-3")])],
                annotations={names.TOPOLOGY_GPU: json.dumps(topo)})
    assert envs(p, "worker") == {"NVIDIA_VISIBLE_DEVICES": "GPU-2,GPU-3", "CUDA_VISIBLE_DEVICES": "GPU-3"}
    assert envs(p, "head") == {"NVIDIA_VISIBLE_DEVICES": "GPU-2"}  # index 0 not in allocatedGPUs


def test_a_bad_topology_annotation_is_refused_naming_the_container() -> None:
    p = pending([("main", {}, [gpu(0, "GPU-0")])], annotations={names.TOPOLOGY_GPU: '{"visibleGPUs": 3}'})
    with pytest.raises(AllocateError, match=r"^default/p/main: .*visibleGPUs a list"):
        envs(p)


def test_aliyun_containers_get_the_variables_aliyuns_plugin_sets() -> None:
    share = [gpu(1, "GPU-1", core=250, memory=4 * GIB)]
    p = pending([("main", {aliyun.ALIYUN_GPU_MEM: 4096}, share), ("side", {aliyun.ALIYUN_GPU_MEM: 2048},
                                                                   [gpu(1, "GPU-1", core=125, memory=2 * GIB)])])
    got = envs(p)
    assert {k: got[k] for k in (aliyun.ALIYUN_IDX, aliyun.ALIYUN_POD, aliyun.ALIYUN_CONTAINER, aliyun.ALIYUN_DEV)} \
        == {aliyun.ALIYUN_IDX: "1", aliyun.ALIYUN_POD: "6144", aliyun.ALIYUN_CONTAINER: "4096",
            aliyun.ALIYUN_DEV: "16384"}
    assert aliyun.ALIYUN_IDX not in envs(pending([("main", {}, share)]))  # not an Aliyun ask


@pytest.mark.parametrize(("grants", "message"), [
    ([], "default/p/main: asks for GPUs but its devshare allocation gives it none"),
    ([gpu(7, "GPU-7")], "default/p/main: the allocation names GPU minor 7, which this node does not have"),
    ([gpu(1, "GPU-old")], "names GPU GPU-old at minor 1, but this node's minor 1 is GPU-1; the Device object is "
                          "stale, reschedule the pod"),
])
def test_grants_this_node_cannot_honour_are_refused_saying_why(grants: list[DeviceGrant], message: str) -> None:
    p = pending([("main", {}, grants), ("other", {}, [gpu(0, "GPU-0")])])
    with pytest.raises(AllocateError) as e:
        envs(p)
    assert message in str(e.value)


def rdma(minor: int, dev_id: str) -> DeviceGrant:
    return DeviceGrant(type=names.RDMA, minor=minor, id=dev_id, core_milli=1000)


def test_rdma_devices_get_their_ids_and_each_device_file_once() -> None:
    p = pending([("main", {}, [rdma(0, "mlx5_0"), rdma(1, "mlx5_1")])])
    got = container_devices(p, "main", INV, names.RDMA)
    assert got.envs == {"DEVSHARE_RDMA_DEVICES": "mlx5_0,mlx5_1"}
    assert got.device_files == ("/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm", "/dev/infiniband/uverbs1")


@pytest.mark.parametrize(("grants", "message"), [
    ([], "default/p/main: asks for rdma but its devshare allocation gives it none"),
    ([rdma(5, "")], "default/p/main: the allocation names rdma 5, not on this node"),
    ([rdma(0, "mlx5_9")], "default/p/main: the allocation names rdma mlx5_9, not on this node"),
])
def test_other_devices_not_on_this_node_are_refused(grants: list[DeviceGrant], message: str) -> None:
    p = pending([("main", {}, grants)])
    with pytest.raises(AllocateError, match=message):
        other_devices(p, "main", INV, names.RDMA)
