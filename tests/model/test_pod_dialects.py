"""Koordinator (seed 001) and Aliyun (seed 002) requests, and mixing dialects (NVIDIA's: test_nvidia.py)."""

from __future__ import annotations

from typing import Any

import pytest

from devshare.model.dialects import aliyun, mgpu, nvidia
from devshare.model.dialects.koordinator_names import (
    KOORD_FPGA,
    KOORD_GPU,
    KOORD_GPU_CORE,
    KOORD_GPU_MEMORY,
    KOORD_GPU_MEMORY_RATIO,
    KOORD_PREFIXES,
    KOORD_RDMA,
    LEGACY_GPU,
)
from devshare.model.errors import InvalidRequest
from devshare.model.pod import parse_pod, validate_pod
from devshare.model.quantity import GIB, MIB
from devshare.model.request import DeviceRequest


def pod(*resources: dict[str, Any], limits: bool = False) -> dict[str, Any]:
    part = "limits" if limits else "requests"
    containers = [{"name": f"c{i}", "resources": {part: dict(r)}} for i, r in enumerate(resources)]
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": containers}}


def devices(p: dict[str, Any], i: int = 0) -> tuple[DeviceRequest, ...]:
    return parse_pod(p).containers[i].devices


def gpu(count: int = 1, core: int = 0, memory: int = 0, ratio: int = 0) -> DeviceRequest:
    return DeviceRequest(type="gpu", count=count, core_milli=core, memory=memory, memory_ratio_milli=ratio)


def refused(p: dict[str, Any], *needles: str) -> str:
    problems = validate_pod(p)
    assert len(problems) == 1, problems
    for n in needles:
        assert n in problems[0], (n, problems[0])
    with pytest.raises(InvalidRequest) as err:
        parse_pod(p)
    assert str(err.value) == problems[0]
    return problems[0]


# --- seed 001's scenarios


@pytest.mark.parametrize("prefix", KOORD_PREFIXES)
def test_gpu_50_is_core_and_ratio_50(prefix: str) -> None:
    (d,) = devices(pod({prefix + "gpu": "50", "cpu": "4", "memory": "8Gi"}))
    assert d == gpu(1, 500, 0, 500)
    assert d.memory_on(8 * GIB) == 4 * GIB  # seed 001: 4Gi of an 8G GPU


def test_gpu_above_100_is_whole_gpus() -> None:
    assert devices(pod({KOORD_GPU: "200"})) == (gpu(2, 1000, 0, 1000),)
    assert devices(pod({KOORD_GPU: "100"})) == (gpu(1, 1000, 0, 1000),)
    refused(pod({KOORD_GPU: "150"}), "koordinator.sh/gpu is 150", "multiple of 100", "100 or 200")


def test_core_with_ratio_or_memory() -> None:
    assert devices(pod({"kubernetes.io/gpu-core": "50", "kubernetes.io/gpu-memory-ratio": "60"})) == (
        gpu(1, 500, 0, 600),
    )
    assert devices(pod({"kubernetes.io/gpu-core": "60", "kubernetes.io/gpu-memory": "4Gi"})) == (gpu(1, 600, 4 * GIB),)
    assert devices(pod({KOORD_GPU_CORE: "200", KOORD_GPU_MEMORY_RATIO: "200"})) == (gpu(2, 1000, 0, 1000),)
    # gpu-memory over several GPUs is split per GPU
    # above 100 in whole multiples: whole cards, on any node (issue 36), the memory coming with them
    assert devices(pod({KOORD_GPU_CORE: "200", KOORD_GPU_MEMORY: "16Gi"})) == (gpu(2, 1000, 0, 1000),)


def test_rdma_and_fpga() -> None:
    assert devices(pod({"kubernetes.io/rdma": "100"})) == (DeviceRequest(type="rdma", count=1, core_milli=1000),)
    assert devices(pod({KOORD_FPGA: "50"})) == (DeviceRequest(type="fpga", count=1, core_milli=500),)
    assert devices(pod({KOORD_RDMA: "300"})) == (DeviceRequest(type="rdma", count=3, core_milli=1000),)
    refused(pod({KOORD_RDMA: "250"}), "multiple of 100")
    # GPU and RDMA together, nvidia.com/gpu with Koordinator's RDMA too
    both = devices(pod({KOORD_GPU: "50", KOORD_RDMA: "100"}))
    assert [d.type for d in both] == ["gpu", "rdma"]
    req = parse_pod(pod({nvidia.NVIDIA_GPU: "1", KOORD_RDMA: "100"}))
    assert [d.type for d in req.containers[0].devices] == ["gpu", "rdma"]
    assert req.dialect == "koordinator"


# --- seed 001's combination rules


def test_memory_and_ratio_together() -> None:
    p = pod({KOORD_GPU_CORE: "50", KOORD_GPU_MEMORY: "4Gi", KOORD_GPU_MEMORY_RATIO: "50"})
    refused(p, "container 'c0'", "gpu-memory", "gpu-memory-ratio", "keep one")


def test_core_not_a_multiple_of_100() -> None:
    refused(pod({KOORD_GPU_CORE: "150", KOORD_GPU_MEMORY_RATIO: "50"}), "gpu-core is 150", "multiple")


def test_core_and_ratio_different_counts() -> None:
    msg = refused(pod({KOORD_GPU_CORE: "200", KOORD_GPU_MEMORY_RATIO: "100"}), "2 GPU(s)", "for 1")
    assert "same multiple of 100" in msg
    refused(pod({KOORD_GPU_CORE: "50", KOORD_GPU_MEMORY_RATIO: "300"}), "for 3")


def test_gpu_with_core_or_ratio() -> None:
    refused(pod({KOORD_GPU: "50", KOORD_GPU_CORE: "50"}), "cannot be combined", "gpu-core")
    refused(pod({KOORD_GPU: "50", KOORD_GPU_MEMORY_RATIO: "50"}), "cannot be combined")
    refused(pod({KOORD_GPU: "50", KOORD_GPU_MEMORY: "1Gi"}), "cannot be combined")


def test_core_alone_is_refused_memory_alone_is_current_koordinators_ask() -> None:
    refused(pod({KOORD_GPU_CORE: "50"}), "no GPU memory", "gpu-memory-ratio")
    # current Koordinator (pkg/scheduler/plugins/deviceshare/utils.go, ValidDeviceResourceCombinations:
    # GPUMemory and GPUMemoryRatio alone) places memory without compute
    assert devices(pod({KOORD_GPU_MEMORY_RATIO: "50"})) == (gpu(1, 0, 0, 500),)
    assert devices(pod({KOORD_GPU_MEMORY: "4Gi"})) == (gpu(1, 0, 4 * GIB),)
    assert devices(pod({KOORD_GPU_MEMORY_RATIO: "200"})) == (gpu(2, 1000, 0, 1000),)  # whole cards


def test_memory_split_must_be_even() -> None:
    refused(pod({"koordinator.sh/gpu.shared": "3", KOORD_GPU_CORE: "90", KOORD_GPU_MEMORY: "1000"}),
            "split evenly over 3", "999")


def test_negative_and_fractional_values() -> None:
    refused(pod({KOORD_GPU: "-50"}), "above 0")
    refused(pod({KOORD_GPU: "0.5"}), "whole number of percent")
    refused(pod({KOORD_GPU_CORE: "50", KOORD_GPU_MEMORY: "-1Gi"}), "above 0")


def test_zero_means_not_asked() -> None:
    req = parse_pod(pod({nvidia.NVIDIA_GPU: "0", KOORD_GPU: 0}))
    assert req.containers[0].devices == () and not req.has_devices()


def test_both_spellings() -> None:
    assert devices(pod({KOORD_GPU: "50", LEGACY_GPU: "50"})) == (gpu(1, 500, 0, 500),)
    refused(pod({KOORD_GPU: "50", LEGACY_GPU: "60"}), "different values", "keep only koordinator.sh/gpu")


def test_limits_when_requests_absent() -> None:
    assert devices(pod({KOORD_GPU: "50"}, limits=True)) == (gpu(1, 500, 0, 500),)
    p = {
        "metadata": {"name": "p"},
        "spec": {
            "containers": [
                {"name": "c", "resources": {"limits": {KOORD_GPU: "100", "cpu": "2"}, "requests": {"cpu": "1"}}}
            ]
        },
    }
    req = parse_pod(p)
    assert req.containers[0].devices == (gpu(1, 1000, 0, 1000),)
    assert req.cpu_milli == 1000  # the request wins over the limit


# --- Aliyun


def test_aliyun_gpu_mem_is_memory_on_one_gpu_without_compute() -> None:
    req = parse_pod(pod({aliyun.ALIYUN_GPU_MEM: "8138"}, limits=True))
    assert req.containers[0].devices == (gpu(1, 0, 8138 * MIB),)
    assert req.dialect == "aliyun"


def test_aliyun_gpu_count() -> None:
    assert devices(pod({aliyun.ALIYUN_GPU_MEM: "4069", aliyun.ALIYUN_GPU_COUNT: "2"})) == (gpu(2, 0, 4069 * MIB),)
    assert devices(pod({aliyun.ALIYUN_GPU_COUNT: "2"})) == (gpu(2, 1000, 0, 1000),)
    refused(pod({aliyun.ALIYUN_GPU_MEM: "-1"}), "aliyun.com/gpu-mem is -1", "above 0")
    refused(pod({aliyun.ALIYUN_GPU_MEM: "100", aliyun.ALIYUN_GPU_COUNT: "-2"}), "gpu-count is -2")
    refused(pod({aliyun.ALIYUN_GPU_COUNT: "1.5"}), "whole number of GPUs")


# --- one dialect per container, and per pod


def test_mixing_dialects_in_a_container() -> None:
    refused(pod({aliyun.ALIYUN_GPU_MEM: "1000", nvidia.NVIDIA_GPU: "1"}), "container 'c0'", "aliyun, nvidia")
    refused(pod({mgpu.MGPU_CORE: "50", mgpu.MGPU_MEMORY: "1k", KOORD_GPU: "50"}), "koordinator, mgpu")
    refused(pod({nvidia.NVIDIA_GPU: "1", KOORD_GPU: "50"}), "koordinator, nvidia")


def test_mixing_dialects_in_a_pod() -> None:
    refused(pod({aliyun.ALIYUN_GPU_MEM: "1000"}, {KOORD_GPU: "50"}), "the pod", "aliyun, koordinator")
    req = parse_pod(pod({nvidia.NVIDIA_GPU: "1"}, {KOORD_GPU: "50"}))
    assert req.dialect == "koordinator"


def test_no_devices_is_koordinator_dialect_by_default() -> None:
    req = parse_pod(pod({"cpu": "500m"}, {}))
    assert req.dialect == "koordinator"
    assert [c.devices for c in req.containers] == [(), ()]
    assert req.cpu_milli == 500
