"""The reporter against the in-memory API: Device object, health changes, vanished cards, node status."""

from __future__ import annotations

import json
from pathlib import Path

from devshare.agent.fake import FakeBackend
from devshare.agent.reporter import Reporter
from devshare.model import names
from devshare.model.device import parse_device
from devshare.model.dialects import mgpu
from devshare.model.dialects.koordinator_names import KOORD_GPU_CORE, KOORD_GPU_MEMORY
from support.agent import GIB, TOPOLOGIES, MemoryClient, write_fake


def test_publishes_device_and_node_status(tmp_path: Path) -> None:
    f = write_fake(tmp_path / "n.yaml", gpus=2, memory="16Gi")
    client = MemoryClient()
    r = Reporter(FakeBackend(f, node="n1"), "n1", client=client)
    assert r.sync()
    nd = parse_device(client.devices["n1"])
    assert len(nd.of_type("gpu")) == 2
    status = client.nodes["n1"]["status"]
    assert status["capacity"][KOORD_GPU_MEMORY] == str(32 * GIB)
    assert status["capacity"][mgpu.MGPU_MEMORY] == str(32 * 1024)
    assert status["allocatable"] == status["capacity"]
    # nothing changed: nothing published again
    assert not r.sync()
    assert client.calls.count("put_device n1") == 1


def test_health_change_is_published_and_allocatable_shrinks(tmp_path: Path) -> None:
    f = write_fake(tmp_path / "n.yaml", gpus=2)
    client = MemoryClient()
    r = Reporter(FakeBackend(f, node="n1"), "n1", client=client)
    r.sync()
    write_fake(f, gpus=2, unhealthy=[1])
    assert r.sync()
    nd = parse_device(client.devices["n1"])
    assert [d.health for d in nd.of_type("gpu")] == [True, False]
    status = client.nodes["n1"]["status"]
    assert status["allocatable"][KOORD_GPU_MEMORY] == str(16 * GIB)
    assert status["capacity"][KOORD_GPU_MEMORY] == str(32 * GIB)


def test_vanished_card_stays_unhealthy_also_across_restarts(tmp_path: Path) -> None:
    f = write_fake(tmp_path / "n.yaml", gpus=3, links=[{"a": 0, "b": 1, "nvlinks": 2, "pcie": "host-bridge"}])
    client = MemoryClient()
    r = Reporter(FakeBackend(f, node="n1"), "n1", client=client)
    r.sync()
    before = parse_device(client.devices["n1"]).of_type("gpu")
    # card 1 is gone; links are by position in the GPU list: 0 -> minor 0, 1 -> minor 2
    write_fake(f, gpus=[{"minor": 0}, {"minor": 2}], links=[{"a": 0, "b": 1, "nvlinks": 1, "pcie": "same-cpu"}])
    # a fresh agent (restart) starts from the Device object in the API
    r2 = Reporter(FakeBackend(f, node="n1"), "n1", client=client)
    r2.load_previous()
    r2.sync()
    nd = parse_device(client.devices["n1"])
    gpus = nd.of_type("gpu")
    assert [(g.minor, g.id, g.health) for g in gpus] == [(g.minor, g.id, g.minor != 1) for g in before]
    assert nd.gpu_bandwidth is not None and len(nd.gpu_bandwidth) == 3
    assert nd.gpu_bandwidth[0][1] == 0.0  # nothing reaches a missing card
    assert nd.gpu_bandwidth[0][2] == 25.0


def test_checkpoint_annotation(tmp_path: Path) -> None:
    f = write_fake(tmp_path / "n.yaml", gpus=2)
    backend = FakeBackend(f, node="n1")
    uuids = [g.uuid for g in backend.discover().gpus]
    cp = tmp_path / "kubelet_internal_checkpoint"
    cp.write_text(json.dumps({"Data": {"PodDeviceEntries": [
        {"PodUID": "old", "ContainerName": "c", "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": [uuids[1]]}},
        {"PodUID": "gone", "ContainerName": "c", "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": [uuids[0]]}},
        {"PodUID": "ours", "ContainerName": "c", "ResourceName": KOORD_GPU_CORE, "DeviceIDs": {"0": ["0-1"]}},
        {"PodUID": "placed", "ContainerName": "c", "ResourceName": "nvidia.com/gpu", "DeviceIDs": {"0": [uuids[0]]}},
    ]}, "Checksum": 1}))
    client = MemoryClient([
        {"kind": "Pod", "metadata": {"name": "old", "uid": "old"}, "spec": {"nodeName": "n1"},
         "status": {"phase": "Running"}},
        # placed by devshare (its nvidia.com/gpu went through devshare's plugin): not held outside
        {"kind": "Pod", "metadata": {"name": "placed", "uid": "placed", "annotations": {names.ALLOCATION: "{}"}},
         "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}},
    ])
    r = Reporter(backend, "n1", client=client, checkpoint=cp, own_resources=[KOORD_GPU_CORE])
    r.sync()
    nd = parse_device(client.devices["n1"])
    assert nd.held_outside == (uuids[1],)
    # without an API (report --once), every entry of a card of this node counts
    offline = parse_device(Reporter(backend, "n1", checkpoint=cp, own_resources=[KOORD_GPU_CORE]).build())
    assert set(offline.held_outside) == set(uuids)


def test_measured_matrix_overrides_links(tmp_path: Path) -> None:
    r = Reporter(FakeBackend(TOPOLOGIES / "dgx1-volta.json", node="n"), "n",
                 override=[[0.0 if i == j else float(i + j) for j in range(8)] for i in range(8)])
    nd = parse_device(r.build())
    assert nd.gpu_bandwidth is not None and nd.gpu_bandwidth[2][5] == 7.0


def test_gpu_labels_on_node_and_device(tmp_path: Path) -> None:
    """Seed 001: the agent labels its Node (and its Device) with the GPU model, driver and vendor, so
    that a nodeSelector on the model works without labelling nodes by hand."""
    from devshare.engine.state import ClusterState
    from devshare.model.node import parse_node

    f = write_fake(tmp_path / "n.yaml", gpus=2, model="NVIDIA A100-SXM4-80GB", driverVersion="535.104.05")
    client = MemoryClient([{"kind": "Node", "metadata": {"name": "n1", "labels": {"zone": "a"}}}])
    r = Reporter(FakeBackend(f, node="n1"), "n1", client=client)
    r.sync()
    labels = client.nodes["n1"]["metadata"]["labels"]
    assert labels == {"zone": "a", names.NODE_GPU_MODEL: "A100-SXM4-80GB", names.KOORD_NODE_GPU_MODEL: "A100-SXM4-80GB",
                      names.NODE_GPU_DRIVER: "535.104.05", names.KOORD_NODE_GPU_DRIVER: "535.104.05",
                      names.NODE_GPU_VENDOR: "nvidia", names.KOORD_NODE_GPU_VENDOR: "nvidia"}
    device = client.devices["n1"]
    assert device["metadata"]["labels"] == {k: v for k, v in labels.items() if k != "zone"}
    # the scheduler reads the model from the Node's label, and from the Device's when the Node has none
    state = ClusterState()
    state.upsert_node(parse_node(client.nodes["n1"]))
    state.set_devices(parse_device(device))
    assert state.gpu_model(state.row_of["n1"]) == "A100-SXM4-80GB"
    state.upsert_node(parse_node({"kind": "Node", "metadata": {"name": "n1"}}))
    assert state.gpu_model(state.row_of["n1"]) == "A100-SXM4-80GB"
    # unchanged: not patched again; a driver upgrade is; an unknown driver removes the label
    calls = client.calls.count("patch_node_labels n1")
    r.sync()
    assert client.calls.count("patch_node_labels n1") == calls
    write_fake(f, gpus=2, model="NVIDIA A100-SXM4-80GB", driverVersion="550.54.15")
    r.sync()
    assert client.nodes["n1"]["metadata"]["labels"][names.KOORD_NODE_GPU_DRIVER] == "550.54.15"
    write_fake(f, gpus=2, model="NVIDIA A100-SXM4-80GB")
    r.sync()
    assert names.NODE_GPU_DRIVER not in client.nodes["n1"]["metadata"]["labels"]


def test_label_refusal_does_not_stop_the_report(tmp_path: Path) -> None:
    class NoLabels(MemoryClient):
        def patch_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
            raise PermissionError("nodes is forbidden")

    client = NoLabels()
    r = Reporter(FakeBackend(write_fake(tmp_path / "n.yaml", gpus=1), node="n1"), "n1", client=client)
    r.sync()
    assert "n1" in client.devices and client.nodes["n1"]["status"]["capacity"]
    off = MemoryClient()
    Reporter(FakeBackend(write_fake(tmp_path / "m.yaml", gpus=1), node="n1"), "n1", client=off,
             label_node=False).sync()
    assert "patch_node_labels n1" not in off.calls
