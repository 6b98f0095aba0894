"""HAMi's names and annotations, pinned from Project-HAMi/HAMi v2.10.0 (commit 4707fb02):
pkg/device/nvidia/device.go (GenerateResourceRequests, defaultExclusiveCoreIfNeeded,
validateMemoryPercentage, PatchAnnotations), pkg/device/devices.go (EncodePodSingleDevice,
DecodeContainerDevices), pkg/scheduler/scheduler.go (Bind)."""

from __future__ import annotations

from typing import Any

from devshare.model import dialects
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.codecs import vgpu
from devshare.model.dialects import hami
from devshare.model.pod import parse_pod, validate_pod
from devshare.model.quantity import MIB
from devshare.model.request import DeviceRequest

GiB = 2**30


def pod(*containers: dict[str, str], init: list[dict[str, str]] | None = None,
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", "resources": {"limits": c}}
                                           for i, c in enumerate(containers)]}
    if init is not None:
        spec["initContainers"] = [{"name": f"i{i}", "resources": {"limits": c}} for i, c in enumerate(init)]
    return {"metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}}, "spec": spec}


def asks(p: dict[str, Any]) -> tuple[str, tuple[DeviceRequest, ...]]:
    req = parse_pod(p)
    return req.dialect, req.containers[0].devices


def test_the_companion_names_make_nvidia_gpu_hamis() -> None:
    assert asks(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"})) == (
        "hami", (DeviceRequest(type="gpu", count=1, core_milli=300, memory=3000 * MIB),))
    # the case: not a whole 40 GiB card any more
    assert asks(pod({"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "25"})) == (
        "hami", (DeviceRequest(type="gpu", count=2, core_milli=0, memory_ratio_milli=250),))
    # alone: NVIDIA's whole cards (which HAMi's defaults give too)
    assert asks(pod({"nvidia.com/gpu": "1"})) == (
        "nvidia", (DeviceRequest(type="gpu", count=1, core_milli=1000, memory_ratio_milli=1000),))


def test_hamis_defaults() -> None:
    # a companion without nvidia.com/gpu: HAMi's webhook adds defaultGPUNum (1)
    assert asks(pod({"nvidia.com/gpumem": "8000"}))[1] == (DeviceRequest(type="gpu", count=1, memory=8000 * MIB),)
    # no memory given: the whole card's memory, and then the card exclusively (gpucores 100)
    assert asks(pod({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "40"}))[1] == (
        DeviceRequest(type="gpu", count=1, core_milli=400, memory_ratio_milli=1000),)
    assert asks(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}))[1][0].whole
    # memory given, no cores: defaultCores (0), no compute claimed
    assert asks(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}))[1][0].core_milli == 0


def test_a_pod_with_a_hami_container_is_hamis_and_so_is_its_bare_nvidia_gpu() -> None:
    req = parse_pod(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}, {"nvidia.com/gpu": "1"}))
    assert req.dialect == "hami"
    assert req.containers[1].devices == (DeviceRequest(type="gpu", count=1, core_milli=1000, memory_ratio_milli=1000),)


def test_the_configuration_makes_every_bare_nvidia_gpu_hamis() -> None:
    dialects.configure_nvidia_gpu("hami")
    try:
        assert asks(pod({"nvidia.com/gpu": "1"}))[0] == "hami"
    finally:
        dialects.configure_nvidia_gpu("nvidia")
    assert asks(pod({"nvidia.com/gpu": "1"}))[0] == "nvidia"


def test_what_hami_clamps_or_ignores_is_refused() -> None:
    (msg,) = validate_pod(pod({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "150", "nvidia.com/gpumem": "1000"}))
    assert "nvidia.com/gpucores is 150" in msg and "0 to 100" in msg
    (msg,) = validate_pod(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "120"}))
    assert "gpumem-percentage is 120" in msg
    (msg,) = validate_pod(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000",
                               "nvidia.com/gpumem-percentage": "50"}))
    assert "both ask for the card's memory" in msg
    (msg,) = validate_pod(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "-5"}))
    assert "gpumem is -5" in msg
    # HAMi's names beside Koordinator's in one container: two dialects
    (msg,) = validate_pod(pod({"nvidia.com/gpumem": "1000", "koordinator.sh/gpu-core": "10",
                               "koordinator.sh/gpu-memory-ratio": "10"}))
    assert "several dialects" in msg and "hami" in msg and "koordinator" in msg


def test_the_annotations_hamis_device_plugin_reads() -> None:
    req = parse_pod(pod({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}, {},
                        init=[{"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000", "nvidia.com/gpucores": "10"}]))
    g = DeviceGrant(type="gpu", minor=1, id="GPU-b", core_milli=300, memory=3000 * MIB)
    gi = DeviceGrant(type="gpu", minor=1, id="GPU-b", core_milli=100, memory=2000 * MIB)
    alloc = PodAllocation(node="n1", containers=(ContainerAllocation(name="c0", devices=(g,)),
                                                 ContainerAllocation(name="c1"),
                                                 ContainerAllocation(name="i0", devices=(gi,), init=True)))
    out = dialects.dialect_of("hami").encode(req, alloc, now_ns=1_787_220_000_500_000_000, device_memory=None)
    # init containers first, one entry per container, a ";" after each (EncodePodSingleDevice)
    expected = "GPU-b,NVIDIA,2000,10:;GPU-b,NVIDIA,3000,30:;;"
    assert out == {"hami.io/vgpu-node": "n1", "hami.io/vgpu-time": "1787220000", "hami.io/bind-time": "1787220000",
                   "hami.io/bind-phase": "allocating", "hami.io/vgpu-devices-allocated": expected,
                   "hami.io/vgpu-devices-to-allocate": expected}
    # and HAMi's decoder reads them back (DecodeContainerDevices)
    devices, problems = vgpu.decode_containers(expected)
    assert problems == [] and [len(c) for c in devices] == [1, 1, 0]


def test_reading_a_pod_hami_placed_with_init_containers_and_without() -> None:
    spec = {"initContainers": [{"name": "warm"}], "containers": [{"name": "main"}, {"name": "logs"}]}
    r = hami.read_placed({"hami.io/vgpu-node": "n1",
                          "hami.io/vgpu-devices-allocated": "GPU-b,NVIDIA,20000,50:;GPU-b,NVIDIA,8000,20:;;"}, spec)
    assert r is not None and r.node == "n1" and r.problems == ()
    assert [(g.container, g.init, g.id, g.core_milli, g.memory) for g in r.grants] == [
        ("warm", True, "GPU-b", 500, 20000 * MIB), ("main", False, "GPU-b", 200, 8000 * MIB)]
    # releases before init containers were listed: app containers only
    r = hami.read_placed({"hami.io/vgpu-devices-allocated": "GPU-b,NVIDIA,8000,20:;;"}, spec)
    assert r is not None and [(g.container, g.init) for g in r.grants] == [("main", False)]
    # to-allocate alone (a pod the device plugin has not served yet)
    r = hami.read_placed({"hami.io/vgpu-devices-to-allocate": "GPU-b,NVIDIA,1,1:;"}, {"containers": [{"name": "m"}]})
    assert r is not None and len(r.grants) == 1
    # a MIG instance's id names its card
    r = hami.read_placed({"hami.io/vgpu-devices-allocated": "GPU-b[1g.10gb-0],NVIDIA,10240,14:;"},
                         {"containers": [{"name": "m"}]})
    assert r is not None and r.grants[0].id == "GPU-b"
    assert hami.read_placed({}, spec) is None


def test_a_malformed_hami_annotation_is_unreadable_not_dropped() -> None:
    r = hami.read_placed({"hami.io/vgpu-devices-allocated": "GPU-b,NVIDIA,lots,20:;"}, {"containers": [{"name": "m"}]})
    assert r is not None and r.unreadable == ("gpu",) and "whole numbers" in r.problems[0]
    r = hami.read_placed({"hami.io/vgpu-devices-allocated": "garbage"}, {"containers": [{"name": "m"}]})
    assert r is not None and r.unreadable == ("gpu",)
