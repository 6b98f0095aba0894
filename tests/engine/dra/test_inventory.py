"""What the cluster's ResourceSlices offer (engine/dra/inventory.py): devshare's devices per node and
every driver's devices indexed as slices come, change and go, and the devices a claim's selectors pick
on each node, kept until a slice changes."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.dra.cel import CelError
from devshare.engine.dra.inventory import Inventory
from devshare.engine.state import ClusterState
from devshare.model import dra
from devshare.model.device import DeviceInfo, NodeDevices
from devshare.model.draslices import device_class_object, parse_device_class, parse_slice, slice_object
from support.cluster import add_node

TYPE_IS_GPU = 'device.attributes["gpu.devshare.io"].type == "gpu"'


def ours(state: ClusterState, node: str) -> tuple[str, list[Any]]:
    obj = slice_object(state.devices[node])
    return obj["metadata"]["name"], parse_slice(obj)


def foreign(name: str, node: str, uuids: list[str], driver: str = "gpu.nvidia.com") -> list[Any]:
    return parse_slice({"metadata": {"name": name}, "spec": {
        "driver": driver, "pool": {"name": node}, "nodeName": node,
        "devices": [{"name": f"gpu-{i}", "attributes": {"uuid": {"string": u}}} for i, u in enumerate(uuids)]}})


def cluster(*nodes: str, gpus: int = 2) -> tuple[ClusterState, Inventory]:
    state, inv = ClusterState(), Inventory()
    for n in nodes:
        add_node(state, n, gpus, rdma=1)
        inv.set_slice(*ours(state, n))
    return state, inv


def test_a_slice_indexes_devshare_s_devices_by_node_type_and_minor() -> None:
    state, inv = cluster("n0")
    name, devices = ours(state, "n0")
    assert len(inv.ours["n0"]) == 3  # two GPUs and one RDMA device
    g1 = inv.device("n0", "gpu", 1)
    assert g1 is not None and (g1.node, g1.device_type, g1.minor, g1.uuid) == ("n0", "gpu", 1, "GPU-n0-1")
    assert inv.by_ref[(dra.DRIVER, g1.pool, g1.name)] is g1
    assert inv.device("n0", "rdma", 0) is not None
    assert inv.device("n0", "gpu", 2) is None and inv.device("n1", "gpu", 0) is None
    assert inv.by_uuid == {}  # devshare's own devices are found by minor, not by UUID
    assert inv.slices[name] == devices


def test_another_driver_s_devices_are_found_by_uuid() -> None:
    _, inv = cluster()
    inv.set_slice("nvidia-n0", foreign("nvidia-n0", "n0", ["GPU-n0-0", "GPU-n0-1"]))
    d = inv.by_uuid["GPU-n0-1"]
    assert (d.driver, d.name) == ("gpu.nvidia.com", "gpu-1")
    assert inv.by_ref[("gpu.nvidia.com", "n0", "gpu-0")].uuid == "GPU-n0-0"
    assert inv.ours == {}


def test_replacing_and_removing_a_slice_drops_what_it_held_and_bumps_the_version() -> None:
    state, inv = cluster("n0")
    name, _ = ours(state, "n0")
    inv.set_slice("nvidia-n0", foreign("nvidia-n0", "n0", ["GPU-n0-0", "GPU-n0-1"]))
    v = inv.version
    inv.set_slice("nvidia-n0", foreign("nvidia-n0", "n0", ["GPU-n0-1"]))  # one device left
    assert set(inv.by_uuid) == {"GPU-n0-1"} and ("gpu.nvidia.com", "n0", "gpu-1") not in inv.by_ref
    assert inv.version > v
    v = inv.version
    inv.remove_slice(name)
    assert "n0" not in inv.ours and inv.device("n0", "gpu", 0) is None
    assert all(k[0] != dra.DRIVER for k in inv.by_ref)
    assert inv.version == v + 1
    inv.remove_slice(name)  # gone already: nothing changes
    inv.remove_slice("never-seen")
    assert inv.version == v + 1


def test_removing_a_slice_keeps_devices_another_slice_now_publishes() -> None:
    state, inv = cluster("n0")
    name, _ = ours(state, "n0")
    inv.set_slice("n0-again", parse_slice({**slice_object(state.devices["n0"]),
                                           "metadata": {"name": "n0-again"}}))
    again = inv.device("n0", "gpu", 0)
    inv.remove_slice(name)
    assert inv.device("n0", "gpu", 0) is again is not None  # the newer slice's device stays
    assert inv.by_ref[(dra.DRIVER, again.pool, again.name)] is again


def test_classes_come_and_go_with_the_version() -> None:
    inv = Inventory()
    info = parse_device_class(device_class_object(dra.CLASS_GPU, "gpu"))
    inv.set_class(info)
    assert inv.classes[dra.CLASS_GPU] is info and inv.version == 1
    inv.remove_class(dra.CLASS_GPU)
    inv.remove_class(dra.CLASS_GPU)
    assert inv.classes == {} and inv.version == 2


def test_matching_gives_each_node_s_selected_devices_in_minor_order() -> None:
    state, inv = cluster("n0", "n1", gpus=3)
    expr = 'device.attributes["gpu.devshare.io"].minor != 1'
    got, error = inv.matching(state, "gpu", (TYPE_IS_GPU, expr), ["n0", "n1", "gone"])
    assert error == ""
    assert {n: [d.minor for d in ds] for n, ds in got.items()} == {"n0": [0, 2], "n1": [0, 2]}
    rdma, _ = inv.matching(state, "rdma", (), ["n0"])
    assert [d.name for d in rdma["n0"]] == [inv.device("n0", "rdma", 0).name]  # type: ignore[union-attr]
    assert inv.matching(state, "fpga", (), ["n0"]) == ({}, "")


def test_matching_skips_a_device_the_state_does_not_know_as_the_slice_says() -> None:
    state, inv = cluster("n0", "n1")
    # n1's Device object now says other GPUs: its slice's UUIDs disagree, so the slice offers nothing there
    state.set_devices(NodeDevices(node="n1", devices=tuple(
        DeviceInfo(type="gpu", minor=i, id=f"GPU-other-{i}") for i in range(2))))
    got, _ = inv.matching(state, "gpu", (), ["n0", "n1"])
    assert list(got) == ["n0"]


def test_matching_reports_the_first_runtime_error_and_refuses_a_bad_expression() -> None:
    state, inv = cluster("n0")
    bad = 'device.attributes["gpu.devshare.io"].nosuch == "x"'
    got, error = inv.matching(state, "gpu", (bad,), ["n0"])
    assert got == {} and "nosuch" in error
    with pytest.raises(CelError):
        inv.matching(state, "gpu", ("device.attributes[",), ["n0"])


def test_matching_answers_are_kept_until_a_slice_changes() -> None:
    state, inv = cluster("n0")
    expr = 'device.attributes["gpu.devshare.io"].uuid == "GPU-n0-0"'
    first, _ = inv.matching(state, "gpu", (expr,), ["n0"])
    assert [d.minor for d in first["n0"]] == [0]
    # a new slice for n0 where minor 1 carries the UUID the selector wants (and the state agrees)
    state.set_devices(NodeDevices(node="n0", devices=(
        DeviceInfo(type="gpu", minor=0, id="GPU-x"), DeviceInfo(type="gpu", minor=1, id="GPU-n0-0"))))
    name, devices = ours(state, "n0")
    inv.set_slice(name, devices)
    again, _ = inv.matching(state, "gpu", (expr,), ["n0"])
    assert [d.minor for d in again["n0"]] == [1]


def node_slice(node: str, gpus: int, ours_: bool) -> list[Any]:
    if not ours_:
        return foreign(f"nvidia-{node}", node, [f"GPU-{node}-{i}" for i in range(gpus)])
    nd = NodeDevices(node=node, devices=tuple(DeviceInfo(type="gpu", minor=i, id=f"GPU-{node}-{i}")
                                             for i in range(gpus)))
    return parse_slice(slice_object(nd))


steps = st.lists(st.tuples(st.sampled_from(["n0", "n1", "n2"]), st.booleans(), st.one_of(st.none(), st.integers(0, 3))),
                 max_size=25)


@settings(max_examples=80, deadline=None)
@given(steps)
def test_the_indexes_always_equal_those_built_from_the_live_slices(ops: list[tuple[str, bool, int | None]]) -> None:
    """Slices set again (devices added, dropped) and removed, in any order: nothing stale stays indexed."""
    inv = Inventory()
    for node, ours_, gpus in ops:
        name = f"{'ours' if ours_ else 'nvidia'}-{node}"
        if gpus is None:
            inv.remove_slice(name)
        else:
            inv.set_slice(name, node_slice(node, gpus, ours_))
    fresh = Inventory()
    for name, devices in inv.slices.items():
        fresh.set_slice(name, devices)
    assert inv.by_ref == fresh.by_ref
    assert inv.by_uuid == fresh.by_uuid
    assert inv.ours == fresh.ours
    assert all(inv.ours.values())  # a node with no devices left is dropped, not kept empty

