"""A device type known from the configuration file alone (``deviceTypes.npu.resources``): its resource
names become a dialect, read like Koordinator's rdma/fpga (a percent of one device), written in
Koordinator's device-allocated annotation, and unregistered when the configuration changes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devshare.model import dialects
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.annotations import encode_annotations
from devshare.model.pod import parse_pod, validate_pod
from devshare.model.podresources import requests_devices, unread_device_asks
from devshare.model.request import WHOLE, DeviceRequest

NPU = "koordinator.sh/npu"
HUAWEI = "huawei.example/npu"


def npu_pod(*containers: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [
        {"name": f"c{i}", "resources": {"limits": dict(limits)}} for i, limits in enumerate(containers)]}}


@pytest.fixture
def npu() -> None:
    dialects.configure_types({"npu": (NPU, HUAWEI)})


def test_unconfigured_names_are_read_by_nobody() -> None:
    pod = npu_pod({NPU: "50"})
    assert not requests_devices(pod)
    assert not parse_pod(pod).has_devices()  # what issue 13 found: placed with devices: []
    assert unread_device_asks(pod, frozenset({"npu"})) == [(NPU, "npu")]
    assert unread_device_asks(npu_pod({"example.com/npu-core": "1"}), frozenset({"npu"})) == [
        ("example.com/npu-core", "npu")]
    assert unread_device_asks(pod, frozenset({"gpu"})) == []
    assert unread_device_asks(npu_pod({NPU: "0"}), frozenset({"npu"})) == []


def test_a_configured_type_is_read_as_a_percent_of_one_device(npu: None) -> None:
    req = parse_pod(npu_pod({NPU: "50"}))
    assert req.dialect == "type:npu"
    assert req.containers[0].devices == (DeviceRequest(type="npu", core_milli=500),)
    assert parse_pod(npu_pod({HUAWEI: "200"})).containers[0].devices == (
        DeviceRequest(type="npu", count=2, core_milli=WHOLE),)
    assert requests_devices(npu_pod({NPU: "50"}))
    assert unread_device_asks(npu_pod({NPU: "50"}), frozenset({"npu"})) == []
    assert NPU in dialects.managed_resources() and HUAWEI in dialects.managed_resources()
    assert validate_pod(npu_pod({NPU: "150"})) == [
        f"container 'c0': {NPU} is 150; above 100 it asks for several whole devices and must be a multiple of 100: "
        "write 100 or 200, or at most 100 for a share of one device"]
    assert "all ask for npu: keep one of them" in validate_pod(npu_pod({NPU: "50", HUAWEI: "50"}))[0]


def test_beside_koordinator_names_the_pod_is_koordinators(npu: None) -> None:
    req = parse_pod(npu_pod({NPU: "50", "koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory-ratio": "30"},
                            {"koordinator.sh/rdma": "100", NPU: "100"}))
    assert req.dialect == "koordinator"
    assert [d.type for d in req.containers[0].devices] == ["npu", "gpu"]
    alloc = PodAllocation(node="n", containers=(
        ContainerAllocation(name="c0", devices=(DeviceGrant(type="npu", minor=1, id="npu-1", core_milli=500),)),
        ContainerAllocation(name="c1", devices=())))
    out = encode_annotations(req, alloc, now_ns=1)
    assert json.loads(out["scheduling.koordinator.sh/device-allocated"]) == {
        "npu": [{"minor": 1, "id": "npu-1", "resources": {NPU: "50"}}]}
    assert json.loads(out["devshare.io/allocation"])["containers"][0]["devices"][0]["type"] == "npu"
    # alone, it writes Koordinator's annotation too (Koordinator records every device type there)
    alone = parse_pod(npu_pod({NPU: "50"}))
    assert "scheduling.koordinator.sh/device-allocated" in encode_annotations(alone, alloc, now_ns=1)


def test_configuring_again_replaces_and_a_taken_name_is_refused(npu: None) -> None:
    dialects.configure_types({"vpu": ("example.com/vpu",)})
    assert "type:npu" not in dialects.DIALECTS and NPU not in dialects.resource_names()
    with pytest.raises(ValueError, match="already read by another dialect"):
        dialects.configure_types({"x": ("example.com/x",), "y": ("nvidia.com/gpu",)})
    assert not [n for n in dialects.DIALECTS if n.startswith("type:")]  # all or nothing
    dialects.configure_types({})
    assert set(dialects.DIALECTS) == {"koordinator", "nvidia", "mgpu", "aliyun", "hami", "volcano-vgpu",
                                      "volcano-gpushare"}
