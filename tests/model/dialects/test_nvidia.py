"""NVIDIA's device plugin name, ``nvidia.com/gpu: N``: N whole GPUs (seed 001: gpu-core and
gpu-memory-ratio of 100 each), written as Koordinator's device-allocated annotation; a pod NVIDIA's
plugin placed counts as holding every GPU of its node until kubelet's checkpoint names its cards."""

from __future__ import annotations

from typing import Any

import pytest

from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.dialects import nvidia
from devshare.model.dialects.koordinator_annotation import decode_koordinator
from devshare.model.errors import InvalidRequest
from devshare.model.pod import parse_pod, validate_pod
from devshare.model.problems import Problems
from devshare.model.quantity import GIB
from devshare.model.request import WHOLE, DeviceRequest, PodRequest


def pod(*resources: dict[str, Any]) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "resources": {"requests": dict(r)}} for i, r in enumerate(resources)]
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": containers}}


def gpu(count: int, core: int, ratio: int) -> DeviceRequest:
    return DeviceRequest(type="gpu", count=count, core_milli=core, memory_ratio_milli=ratio)


def test_nvidia_gpu_is_whole_gpus() -> None:
    """``nvidia.com/gpu: 2`` -> gpu-core 200 + gpu-memory-ratio 200: two GPUs, 100% each."""
    p = pod({nvidia.NVIDIA_GPU: "2", "cpu": "4", "memory": "8Gi"})
    req = parse_pod(p)
    assert req.containers[0].devices == (gpu(2, 1000, 1000),)
    assert req.dialect == "nvidia"
    assert (req.cpu_milli, req.memory_bytes) == (4000, 8 * GIB)
    assert req.containers[0].devices[0].whole
    assert req.containers[0].devices[0].memory_on(8 * GIB) == 8 * GIB  # 16Gi over the two GPUs


@pytest.mark.parametrize(("value", "needle"), [("-1", "nvidia.com/gpu is -1"), ("1.5", "whole number of GPUs"),
                                              ("lots", "not a Kubernetes quantity")])
def test_negative_and_fractional_values(value: str, needle: str) -> None:
    (problem,) = validate_pod(pod({nvidia.NVIDIA_GPU: value}))
    assert problem.startswith("container 'c0': ") and needle in problem
    with pytest.raises(InvalidRequest) as err:
        parse_pod(pod({nvidia.NVIDIA_GPU: value}))
    assert str(err.value) == problem


def test_the_container_reader() -> None:
    problems = Problems()
    assert nvidia.read_container({nvidia.NVIDIA_GPU: "4"}, "c", problems) == [gpu(4, WHOLE, WHOLE)]
    assert nvidia.read_container({nvidia.NVIDIA_GPU: "0"}, "c", problems) == []  # zero: not asked
    assert nvidia.read_container({"cpu": "1"}, "c", problems) == []
    assert not problems
    assert nvidia.read_container({nvidia.NVIDIA_GPU: "-2"}, "container 'c'", problems) == []
    assert nvidia.read_container({nvidia.NVIDIA_GPU: "2000"}, "container 'c'", problems) == []
    assert problems.messages() == [
        "container 'c': nvidia.com/gpu is -2; it must be a number of whole GPUs, 1 or more",
        "container 'c': nvidia.com/gpu is '2000', far beyond any device: it must be at most 1024 devices"]
    assert nvidia.whole_devices(nvidia.NVIDIA_GPU, 0) is None and nvidia.whole_devices(nvidia.NVIDIA_GPU, 3) is None


def test_a_pod_nvidias_plugin_placed_holds_its_nodes_gpus_until_the_checkpoint_says() -> None:
    spec = {"initContainers": [{"name": "warm", "resources": {"limits": {nvidia.NVIDIA_GPU: "1"}}}],
            "containers": [{"name": "main"}]}
    r = nvidia.read_placed({}, spec)
    assert r is not None
    assert (r.dialect, r.unreadable, r.in_checkpoint, r.grants, r.node) == ("nvidia-plugin", ("gpu",), True, (), None)
    assert len(r.problems) == 1 and "every GPU of the node counts as held" in r.problems[0]
    assert nvidia.read_placed({}, {"containers": [{"name": "c", "resources": {"limits": {nvidia.NVIDIA_GPU: "0"}}}]}) \
        is None
    assert nvidia.read_placed({}, {"containers": [{"name": "c"}]}) is None
    assert nvidia.read_placed({}, "not a spec") is None


def test_its_annotation_is_koordinators() -> None:
    alloc = PodAllocation(node="n", containers=(ContainerAllocation(name="c", devices=(
        DeviceGrant(type="gpu", minor=1, id="GPU-1", core_milli=WHOLE, memory=16 * GIB, memory_ratio_milli=WHOLE),)),))
    d = nvidia.NvidiaDialect()
    out = d.encode(PodRequest(namespace="default", name="p", dialect="nvidia"), alloc, now_ns=1, device_memory=None)
    decoded = decode_koordinator(out)
    assert decoded is not None and [g.minor for g in decoded["gpu"]] == [1]
    assert d.encode(PodRequest(namespace="default", name="p"), PodAllocation(node="n"), now_ns=1,
                    device_memory=None) == {}
    assert d.managed_resources == (nvidia.NVIDIA_GPU,) and d.resource_names == {nvidia.NVIDIA_GPU}
