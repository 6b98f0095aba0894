"""DRA on the node (:mod:`devshare.agent.dra.node`): the node's ResourceSlice, published from the agent's
inventory, written only when it changed. The kubelet plugin it serves is ``test_plugin.py``'s."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from devshare.agent.dra.node import RESYNC, DraNode, extras_of, publish_slice
from devshare.agent.fake import FakeBackend
from devshare.agent.inventory import Gpu, Inventory
from devshare.agent.reporter import node_devices
from devshare.model import draslices, names
from support.agent import write_fake


class Slices:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes = 0
        self.reads = 0
        self.claims: dict[str, dict[str, Any]] = {}
        self.down = False

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claims.get(f"{namespace}/{name}")

    def get_slice(self, name: str) -> dict[str, Any] | None:
        self.reads += 1
        if self.down:
            raise ConnectionError("connection refused")
        return self.objects.get(name)

    def create_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        self.objects[obj["metadata"]["name"]] = {**obj, "metadata": {**obj["metadata"], "resourceVersion": "1"}}
        return self.objects[obj["metadata"]["name"]]

    def replace_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        self.objects[obj["metadata"]["name"]] = obj
        return obj


def dra_node(api: Slices, inv: Inventory, tmp_path: Path) -> DraNode:
    nd = node_devices("n1", inv)
    return DraNode("n1", api, lambda: inv, lambda: nd, cdi_dir=tmp_path / "cdi", plugin_dir=tmp_path / "p",
                   registry_dir=tmp_path / "r")


def test_the_node_slice_is_published_from_the_inventory_and_only_when_it_changes(tmp_path: Path) -> None:
    backend = FakeBackend(write_fake(tmp_path / "n.yaml", gpus=2, memory="16Gi"), node="n1")
    inv = backend.discover()
    nd = node_devices("n1", inv)
    api = Slices()
    published = publish_slice(api, nd, inv)
    assert published is not None
    devices = published["spec"]["devices"]
    assert [d["name"] for d in devices] == ["gpu-0", "gpu-1"]
    assert devices[0]["allowMultipleAllocations"] is True
    assert devices[0]["capacity"]["compute"]["value"] == "100"
    assert devices[0]["attributes"]["uuid"] == {"string": inv.gpus[0].uuid}
    assert publish_slice(api, nd, inv) is None
    node = DraNode("n1", api, lambda: inv, lambda: nd, cdi_dir=tmp_path / "cdi", plugin_dir=tmp_path / "p",
                   registry_dir=tmp_path / "r")
    node.refresh(now=0.0)
    node.refresh(now=1.0)
    assert api.writes == 1  # nothing changed: no request
    one_gpu = node_devices("n1", inv.__class__(gpus=inv.gpus[:1], driver_version=inv.driver_version))
    node.devices = lambda: one_gpu
    node.refresh(now=2.0)
    assert api.writes == 2
    assert api.objects[draslices.slice_name("n1")]["spec"]["pool"]["generation"] == 2


def test_extras_carry_the_numa_node_when_known_and_the_driver_version() -> None:
    inv = Inventory(gpus=(Gpu(minor=0, uuid="G0", numa_node=1), Gpu(minor=2, uuid="G2")), driver_version="580.65")
    assert extras_of(inv) == {
        (names.GPU, 0): draslices.DeviceExtras(numa_node=1, driver_version="580.65"),
        (names.GPU, 2): draslices.DeviceExtras(numa_node=None, driver_version="580.65"),
    }


def test_nothing_is_read_until_the_node_has_devices_then_reread_after_the_resync(tmp_path: Path) -> None:
    inv = Inventory(gpus=(Gpu(minor=0, uuid="G0", memory=2**34),))
    api = Slices()
    node = dra_node(api, inv, tmp_path)
    node.devices = lambda: None
    node.refresh(now=0.0)
    assert api.reads == api.writes == 0
    nd = node_devices("n1", inv)
    node.devices = lambda: nd
    node.refresh(now=0.0)
    node.refresh(now=RESYNC - 1)
    assert (api.reads, api.writes) == (1, 1)
    del api.objects[draslices.slice_name("n1")]  # someone deleted the slice
    node.refresh(now=RESYNC)
    assert (api.reads, api.writes) == (2, 2)
    assert draslices.slice_name("n1") in api.objects


def test_a_failed_write_is_logged_and_tried_again_next_round(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    inv = Inventory(gpus=(Gpu(minor=0, uuid="G0", memory=2**34),))
    api = Slices()
    node = dra_node(api, inv, tmp_path)
    api.down = True
    with caplog.at_level(logging.WARNING, "devshare.agent.dra"):
        node.refresh(now=0.0)
    assert f"publishing ResourceSlice {draslices.slice_name('n1')} failed: connection refused" in caplog.text
    api.down = False
    node.refresh(now=1.0)  # not marked published: tried at once, not after the resync
    assert api.writes == 1
