"""Peers' inventories read beside devshare's Device (issue 36): Koordinator's Device as koordlet writes it
(koordinator-sh/koordinator a7a1b76b apis/scheduling/v1alpha1/device_types.go), HAMi's
hami.io/node-nvidia-register (Project-HAMi/HAMi v2.10.0 pkg/device/devices.go MarshalNodeDevices and the
older EncodeNodeDevices), Volcano's volcano.sh/node-vgpu-register and gpushare capacity."""

from __future__ import annotations

from typing import Any

import pytest

from devshare.model import inventory
from devshare.model.device import DeviceInfo, NodeDevices
from devshare.model.errors import InvalidDevice
from devshare.model.quantity import MIB

GiB = 2**30


def node(annotations: dict[str, str] | None = None, capacity: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "annotations": annotations or {}}, "status": {"capacity": capacity or {}}}


def test_koordinators_device() -> None:
    obj = {"apiVersion": "scheduling.koordinator.sh/v1alpha1", "kind": "Device",
           "metadata": {"name": "n1", "labels": {"node.koordinator.sh/gpu-model": "A100"},
                        "annotations": {"node.koordinator.sh/gpu-checkpoints": '[{"podUID":"u","containerName":"c",'
                                        '"resourceName":"nvidia.com/gpu","deviceIDs":["GPU-1"]}]'}},
           "spec": {"devices": [
               {"type": "gpu", "id": "GPU-0", "minor": 0, "health": True, "topology": {"socketID": 0},
                "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "40Gi",
                              "koordinator.sh/gpu-memory-ratio": "100"}},
               {"type": "gpu", "id": "GPU-1", "minor": 1, "health": True,
                "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "40Gi"}},
               {"type": "gpu", "id": "GPU-2", "minor": 2,  # health left out: Koordinator's default, false
                "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "40Gi"}},
               {"type": "rdma", "id": "0000:1f:00.0", "health": True, "resources": {"koordinator.sh/rdma": "100"}}]}}
    nd = inventory.koordinator_device(obj)
    assert [(d.type, d.minor, d.id, d.health, d.memory) for d in nd.devices] == [
        ("gpu", 0, "GPU-0", True, 40 * GiB), ("gpu", 1, "GPU-1", True, 40 * GiB), ("gpu", 2, "GPU-2", False, 40 * GiB),
        ("rdma", 0, "0000:1f:00.0", True, 0)]
    assert nd.held_outside == ("GPU-1",) and nd.gpu_model == "A100"
    with pytest.raises(InvalidDevice, match="Koordinator Device"):
        inventory.koordinator_device({"metadata": {"name": "n1"}, "spec": {"devices": [{"type": "gpu", "minor": 0}]}})


def test_hamis_register_json_and_older_list() -> None:
    js = ('[{"id":"GPU-a","count":10,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB","mode":"hami-core",'
          '"health":true},{"id":"GPU-b","index":1,"count":10,"devmem":40960,"devcore":100,'
          '"type":"NVIDIA A100-SXM4-40GB","numa":1,"mode":"hami-core"}]')
    nd = inventory.hami_register(node({"hami.io/node-nvidia-register": js}))
    assert nd is not None
    assert [(d.minor, d.id, d.health, d.memory, d.model) for d in nd.devices] == [
        (0, "GPU-a", True, 40960 * MIB, "NVIDIA A100-SXM4-40GB"),
        (1, "GPU-b", False, 40960 * MIB, "NVIDIA A100-SXM4-40GB")]
    old = "GPU-c,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:GPU-d,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
    nd = inventory.hami_register(node({"hami.io/node-nvidia-register": old}))
    assert nd is not None and [(d.minor, d.id) for d in nd.devices] == [(0, "GPU-c"), (1, "GPU-d")]
    nine = "GPU-e,10,24576,100,NVIDIA L4,0,true,3,hami-core:"
    nd = inventory.hami_register(node({"hami.io/node-nvidia-register": nine}))
    assert nd is not None and nd.devices[0].minor == 3
    assert inventory.hami_register(node()) is None
    with pytest.raises(InvalidDevice, match="not HAMi's device list"):
        inventory.hami_register(node({"hami.io/node-nvidia-register": "GPU-x,ten,1,2:"}))


def test_volcano_register_and_gpushare_capacity() -> None:
    reg = "GPU-a,10,40960,NVIDIA A100-SXM4-40GB,true,hami-core:GPU-b,10,40960,NVIDIA A100-SXM4-40GB,false,hami-core:"
    nd = inventory.volcano_register(node({"volcano.sh/node-vgpu-register": reg}))
    assert nd is not None
    assert [(d.minor, d.id, d.health) for d in nd.devices] == [(0, "GPU-a", True), (1, "GPU-b", False)]
    nd = inventory.capacity_devices(node({"volcano.sh/gpu-unhealthy-ids": "1"},
                                         {"volcano.sh/gpu-memory": "49152", "volcano.sh/gpu-number": "2"}))
    assert nd is not None and [(d.id, d.memory, d.health) for d in nd.devices] == [
        ("n1/gpu-0", 24576 * MIB, True), ("n1/gpu-1", 24576 * MIB, False)]
    nd = inventory.capacity_devices(node(capacity={"aliyun.com/gpu-mem": "65536", "aliyun.com/gpu-count": "2"}))
    assert nd is not None and len(nd.devices) == 2 and nd.devices[0].memory == 32768 * MIB
    assert inventory.capacity_devices(node(capacity={"aliyun.com/gpu-mem": "100"})) is None


def test_the_first_source_wins_and_a_bad_one_is_skipped_with_its_reason() -> None:
    a = NodeDevices(node="n1", devices=(DeviceInfo(type="gpu", minor=0, id="A", memory=GiB),))
    b = NodeDevices(node="n1", devices=(DeviceInfo(type="gpu", minor=0, id="B", memory=GiB),))
    assert inventory.choose({"hami": b, "koordinator": a}) == ("koordinator", a)
    assert inventory.choose({"devshare": None, "capacity": b}) == ("capacity", b)
    assert inventory.choose({}) is None
    sources = inventory.node_sources(node({"hami.io/node-nvidia-register": "[oops"}))
    assert sources[0][0] == "hami" and sources[0][1] is None and "not HAMi's device list" in str(sources[0][2])
