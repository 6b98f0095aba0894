"""The ResourceSlice devshare publishes from a node's inventory, read back, and republished."""

from __future__ import annotations

import pytest

from devshare.model import dra, draslices
from devshare.model.device import DeviceInfo, NodeDevices

GiB = 2**30


def node() -> NodeDevices:
    return NodeDevices(node="n1", gpu_model="A100", devices=(
        DeviceInfo(type="gpu", minor=0, id="GPU-0", memory=80 * GiB),
        DeviceInfo(type="gpu", minor=1, id="GPU-1", memory=80 * GiB, health=False),
        DeviceInfo(type="rdma", minor=0, id="mlx5_0")))


def test_the_slice_offers_healthy_devices_with_devshare_capacities_and_attributes() -> None:
    extras = {("gpu", 0): draslices.DeviceExtras(numa_node=1, driver_version="535.104.05")}
    obj = draslices.slice_object(node(), extras=extras)
    spec = obj["spec"]
    assert (obj["metadata"]["name"], spec["driver"], spec["nodeName"]) == ("n1-gpu.devshare.io", dra.DRIVER, "n1")
    assert spec["pool"] == {"name": "n1", "generation": 1, "resourceSliceCount": 1}
    gpu, rdma = spec["devices"]  # the unhealthy GPU is not offered
    assert gpu["name"] == "gpu-0" and gpu["allowMultipleAllocations"] is True
    assert gpu["attributes"] == {"type": {"string": "gpu"}, "uuid": {"string": "GPU-0"}, "minor": {"int": 0},
                                 "model": {"string": "A100"}, "numaNode": {"int": 1},
                                 "driverVersion": {"version": "535.104.5"}}
    assert gpu["capacity"]["compute"]["value"] == "100"
    assert gpu["capacity"]["compute"]["requestPolicy"]["validRange"]["step"] == "1"
    assert gpu["capacity"]["memory"] == {"value": "80Gi", "requestPolicy": {
        "default": "0", "validRange": {"min": "0", "step": "1Mi"}}}
    assert rdma["name"] == "rdma-0" and set(rdma["capacity"]) == {"share"}
    parsed = draslices.parse_slice(obj)
    assert [(d.device_type, d.minor, d.uuid) for d in parsed] == [("gpu", 0, "GPU-0"), ("rdma", 0, "mlx5_0")]
    assert parsed[0].capacity["gpu.devshare.io"]["memory"] == 80 * GiB


@pytest.mark.parametrize(("given", "want"), [("535.104.05", "535.104.5"), ("550.54", "550.54.0"), ("12", "12.0.0"),
                                             ("1.2.3-rc.1", "1.2.3-rc.1"), ("abc", None)])
def test_driver_versions_become_semantic_versions(given: str, want: str | None) -> None:
    assert draslices.semver_of(given) == want


def test_slice_changes_republish_with_the_next_generation() -> None:
    current = {**draslices.slice_object(node()), "metadata": {"name": "n1-gpu.devshare.io", "resourceVersion": "7",
                                                         "labels": {dra.PUBLISHED_BY: "agent"}}}
    same = draslices.slice_object(node())
    assert not draslices.slice_changed(current, same)
    other = draslices.slice_object(NodeDevices(node="n1", devices=node().devices[:1]))
    assert draslices.slice_changed(current, other)
    nxt = draslices.next_slice(current, other)
    assert nxt["metadata"]["resourceVersion"] == "7" and nxt["spec"]["pool"]["generation"] == 2
