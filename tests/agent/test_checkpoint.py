"""kubelet's checkpoint, both formats, and the cards it shows held outside devshare.

The NUMA-keyed format (kubelet >= 1.20) is read from files kubelet's own device manager wrote:
``fixtures/kubelet-v1.37.2/`` was made by ``tests/e2e/kubelet_fixtures.py`` (the command is in its
docstring) running k8s.io/kubernetes v1.37.2's pkg/kubelet/cm/devicemanager (kubelet-harness) with
devshare's device plugins and another vendor's; ``harness-view.json`` is what that device manager
said each container holds. ``tests/e2e/test_kubelet_checkpoint.py`` makes them again in CI and checks
the committed ones still have the shape kubelet writes. The flat format of kubelet <= 1.19 (FLAT
below) is written by no code the suite can build; it follows kubernetes v1.19.0
pkg/kubelet/cm/devicemanager/checkpoint/checkpoint.go (``PodDevicesEntry.DeviceIDs []string``).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.agent.checkpoint import held_outside, parse_checkpoint, physical_id, read_checkpoint
from devshare.model.errors import InvalidInput

KUBELET = Path(__file__).with_name("fixtures") / "kubelet-v1.37.2"

FLAT = {
    "Data": {
        "PodDeviceEntries": [
            {"PodUID": "p1", "ContainerName": "cuda", "ResourceName": "nvidia.com/gpu",
             "DeviceIDs": ["GPU-a", "GPU-b"], "AllocResp": base64.b64encode(b"\x0a\x00").decode()},
            {"PodUID": "p2", "ContainerName": "main", "ResourceName": "koordinator.sh/gpu-core",
             "DeviceIDs": ["0-1", "0-2"], "AllocResp": ""},
        ],
        "RegisteredDevices": {"nvidia.com/gpu": ["GPU-a", "GPU-b", "GPU-c"]},
    },
    "Checksum": 1234,
}
NUMA = {
    "Data": {
        "PodDeviceEntries": [
            {"PodUID": "p1", "ContainerName": "cuda", "ResourceName": "nvidia.com/gpu",
             "DeviceIDs": {"1": ["GPU-b"], "0": ["GPU-a"]}, "AllocResp": None},
            {"PodUID": "p3", "ContainerName": "x", "ResourceName": "nvidia.com/gpu",
             "DeviceIDs": {"-1": ["GPU-c::2"]}},
        ],
        "RegisteredDevices": {},
    },
    "Checksum": 99,
}


def test_flat_format() -> None:
    entries = parse_checkpoint(json.dumps(FLAT))
    assert [(e.pod_uid, e.container, e.resource, e.device_ids) for e in entries] == [
        ("p1", "cuda", "nvidia.com/gpu", ("GPU-a", "GPU-b")),
        ("p2", "main", "koordinator.sh/gpu-core", ("0-1", "0-2")),
    ]


def test_what_kubelets_device_manager_wrote() -> None:
    """Every entry of kubelet v1.37's checkpoint, as the device manager itself reports them."""
    entries = read_checkpoint(KUBELET / "kubelet_internal_checkpoint")
    view = json.loads((KUBELET / "harness-view.json").read_text())
    want = sorted((p["uid"], c["name"], r, tuple(sorted(ids))) for p in view["pods"] for c in p["containers"]
                  for r, ids in c["devices"].items())
    assert sorted((e.pod_uid, e.container, e.resource, tuple(sorted(e.device_ids))) for e in entries) == want
    assert {e.resource for e in entries} == {"koordinator.sh/gpu-core", "koordinator.sh/gpu-memory-ratio",
                                            "nvidia.com/gpu"}
    raw = json.loads((KUBELET / "kubelet_internal_checkpoint").read_text())
    assert all(isinstance(e["DeviceIDs"], dict) for e in raw["Data"]["PodDeviceEntries"])  # NUMA-keyed


def test_cards_another_plugin_holds_in_kubelets_checkpoint() -> None:
    """seed 001: the card NVIDIA's plugin handed out (through kubelet v1.37) is held outside devshare;
    devshare's own resources are not."""
    entries = read_checkpoint(KUBELET / "kubelet_internal_checkpoint")
    held = held_outside(entries, known_ids={"GPU-fixture-node-0", "GPU-fixture-node-1"},
                        own_resources={"koordinator.sh/gpu-core", "koordinator.sh/gpu-memory-ratio"})
    assert held == [{"podUID": "22222222-2222-4222-8222-222222222222", "containerName": "cuda",
                     "resourceName": "nvidia.com/gpu", "deviceIDs": ["GPU-fixture-node-0"]}]


def test_numa_keyed_format() -> None:
    entries = parse_checkpoint(json.dumps(NUMA).encode())
    assert entries[0].device_ids == ("GPU-a", "GPU-b")
    assert entries[1].device_ids == ("GPU-c::2",)


def test_held_outside_excludes_own_resources_dead_pods_and_unknown_cards() -> None:
    entries = parse_checkpoint(FLAT) + parse_checkpoint(NUMA)
    held = held_outside(entries, known_ids={"GPU-a", "GPU-c"}, own_resources={"koordinator.sh/gpu-core"})
    assert held == [
        {"podUID": "p1", "containerName": "cuda", "resourceName": "nvidia.com/gpu", "deviceIDs": ["GPU-a"]},
        {"podUID": "p1", "containerName": "cuda", "resourceName": "nvidia.com/gpu", "deviceIDs": ["GPU-a"]},
        {"podUID": "p3", "containerName": "x", "resourceName": "nvidia.com/gpu", "deviceIDs": ["GPU-c"]},
    ]
    assert held_outside(entries, known_ids={"GPU-a", "GPU-c"}, own_resources=(), live_pods={"p3"}) == [held[2]]


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_checkpoint(tmp_path / "none") == []
    (tmp_path / "cp").write_text(json.dumps(NUMA))
    assert len(read_checkpoint(tmp_path / "cp")) == 2


@pytest.mark.parametrize("text", ["{", "[]", '{"Data": {"PodDeviceEntries": {}}}',
                                  '{"Data": {"PodDeviceEntries": [{"DeviceIDs": 3}]}}'])
def test_bad_checkpoints(text: str) -> None:
    with pytest.raises(InvalidInput):
        parse_checkpoint(text)


def test_physical_id() -> None:
    assert physical_id("GPU-a::3") == "GPU-a"
    assert physical_id("GPU-a-_-3") == "GPU-a"
    assert physical_id("GPU-a") == "GPU-a"


ids = st.lists(st.from_regex(r"GPU-[a-f0-9]{4}", fullmatch=True), max_size=6)


@given(st.lists(st.tuples(st.sampled_from(["-1", "0", "1", "2"]), ids), max_size=4))
def test_both_formats_name_the_same_devices(parts: list[tuple[str, list[str]]]) -> None:
    numa: dict[str, list[str]] = {}
    for node, part in parts:
        numa.setdefault(node, []).extend(part)
    flat = [i for node in sorted(numa, key=lambda k: (len(k), k)) for i in numa[node]]
    entry = {"PodUID": "p", "ContainerName": "c", "ResourceName": "nvidia.com/gpu"}
    a = parse_checkpoint({"Data": {"PodDeviceEntries": [{**entry, "DeviceIDs": numa}]}})
    b = parse_checkpoint({"Data": {"PodDeviceEntries": [{**entry, "DeviceIDs": flat}]}})
    assert sorted(a[0].device_ids) == sorted(b[0].device_ids) == sorted(flat)
