"""Volcano's vGPU and gpushare names and annotations, pinned from volcano-sh/volcano
v1.16.0-alpha.1-42-ged72c7c8: pkg/scheduler/api/devices/util.go (ExtractResourceRequest),
pkg/scheduler/api/devices/nvidia/vgpu/{device_info.go (Allocate), type.go, utils.go (encodePodDevices)},
pkg/scheduler/api/devices/nvidia/gpushare/{share.go, type.go}; the device plugin side from
Project-HAMi/volcano-vgpu-device-plugin pkg/plugin/vgpu/util/util.go (GetNextDeviceRequest: entry i is
container i)."""

from __future__ import annotations

from typing import Any

from devshare.model import dialects
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.dialects import volcano
from devshare.model.pod import parse_pod, validate_pod
from devshare.model.quantity import MIB
from devshare.model.request import DeviceRequest


def pod(*containers: dict[str, str], init: list[dict[str, str]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": f"c{i}", "resources": {"limits": c}}
                                           for i, c in enumerate(containers)]}
    if init is not None:
        spec["initContainers"] = [{"name": f"i{i}", "resources": {"limits": c}} for i, c in enumerate(init)]
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


def test_vgpu_requests() -> None:
    req = parse_pod(pod({"volcano.sh/vgpu-number": "2", "volcano.sh/vgpu-memory": "8000",
                         "volcano.sh/vgpu-cores": "25"}))
    assert req.dialect == "volcano-vgpu"
    assert req.containers[0].devices == (DeviceRequest(type="gpu", count=2, core_milli=250, memory=8000 * MIB),)
    # vgpu-memory alone: one card (ExtractResourceRequest's singledevice)
    assert parse_pod(pod({"volcano.sh/vgpu-memory": "4000"})).containers[0].devices == (
        DeviceRequest(type="gpu", count=1, memory=4000 * MIB),)
    # no memory given: the whole card's memory (101 -> 100 percent); cores default 0
    assert parse_pod(pod({"volcano.sh/vgpu-number": "1"})).containers[0].devices == (
        DeviceRequest(type="gpu", count=1, memory_ratio_milli=1000),)
    assert parse_pod(pod({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory-percentage": "40"})).containers[
        0].devices == (DeviceRequest(type="gpu", count=1, memory_ratio_milli=400),)


def test_vgpu_refusals() -> None:
    (msg,) = validate_pod(pod({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-cores": "101"}))
    assert "vgpu-cores is 101" in msg
    (msg,) = validate_pod(pod({"volcano.sh/vgpu-cores": "20"}))
    assert "vgpu-number is not given" in msg
    (msg,) = validate_pod(pod({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "100",
                               "volcano.sh/vgpu-memory-percentage": "10"}))
    assert "both ask" in msg
    # Volcano's node side gives init containers no vGPU
    (msg,) = validate_pod(pod({"volcano.sh/vgpu-number": "1"}, init=[{"volcano.sh/vgpu-number": "1"}]))
    assert "init container 'i0'" in msg


def test_vgpu_annotations_one_entry_per_app_container() -> None:
    req = parse_pod(pod({}, {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "8000",
                             "volcano.sh/vgpu-cores": "25"}))
    g = DeviceGrant(type="gpu", minor=0, id="GPU-a", core_milli=250, memory=8000 * MIB)
    alloc = PodAllocation(node="vc-1", containers=(ContainerAllocation(name="c0"),
                                                   ContainerAllocation(name="c1", devices=(g,))))
    out = dialects.dialect_of("volcano-vgpu").encode(req, alloc, now_ns=1_787_220_000_000_000_000, device_memory=None)
    assert out == {"volcano.sh/vgpu-node": "vc-1", "volcano.sh/vgpu-time": "1787220000",
                   "volcano.sh/bind-time": "1787220000", "volcano.sh/bind-phase": "allocating",
                   "volcano.sh/vgpu-ids-new": ";GPU-a,NVIDIA,8000,25:",
                   "volcano.sh/devices-to-allocate": ";GPU-a,NVIDIA,8000,25:"}


def test_reading_a_pod_volcano_placed_names_the_containers_that_asked() -> None:
    spec = {"containers": [{"name": "proxy"},
                           {"name": "model", "resources": {"limits": {"volcano.sh/vgpu-number": "1"}}}]}
    r = dialects.dialect_of("volcano-vgpu").read_placed({"volcano.sh/vgpu-ids-new": "GPU-a,NVIDIA,8000,25:",
                                                          "volcano.sh/vgpu-node": "vc-1"}, spec)
    assert r is not None and r.problems == () and r.node == "vc-1"
    assert [(g.container, g.id, g.core_milli, g.memory) for g in r.grants] == [("model", "GPU-a", 250, 8000 * MIB)]


def test_gpushare_requests_annotations_and_placed_pods() -> None:
    req = parse_pod(pod({"volcano.sh/gpu-memory": "10240"}))
    assert req.dialect == "volcano-gpushare"
    assert req.containers[0].devices == (DeviceRequest(type="gpu", count=1, memory=10240 * MIB),)
    assert parse_pod(pod({"volcano.sh/gpu-number": "2"})).containers[0].devices[0].whole
    (msg,) = validate_pod(pod({"volcano.sh/gpu-memory": "1024"}, {"volcano.sh/gpu-memory": "1024"}))
    assert "records one card for the whole pod" in msg
    g = DeviceGrant(type="gpu", minor=1, memory=10240 * MIB)
    out = dialects.dialect_of("volcano-gpushare").encode(
        req, PodAllocation(node="n", containers=(ContainerAllocation(name="c0", devices=(g,)),)), now_ns=7,
        device_memory=None)
    assert out == {"volcano.sh/gpu-index": "1", "volcano.sh/predicate-time": "7", "volcano.sh/gpu-assigned": "false"}
    # placed: max(largest init container, sum of app containers) on the card (getGPUMemoryOfPod)
    spec = {"initContainers": [{"name": "i", "resources": {"limits": {"volcano.sh/gpu-memory": "3000"}}}],
            "containers": [{"name": "a", "resources": {"limits": {"volcano.sh/gpu-memory": "1000"}}},
                           {"name": "b", "resources": {"limits": {"volcano.sh/gpu-memory": "1500"}}}]}
    r = volcano.read_gpushare_placed({"volcano.sh/gpu-index": "0"}, spec)
    assert r is not None and [(g.minor, g.memory) for g in r.grants] == [(0, 3000 * MIB)]
    r = volcano.read_gpushare_placed({"volcano.sh/gpu-index": "x"}, spec)
    assert r is not None and r.unreadable == ("gpu",)
