"""kubelet's checkpoint, both formats, and the cards it shows held outside devshare."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.agent.checkpoint import held_outside, parse_checkpoint, physical_id, read_checkpoint
from devshare.model.errors import InvalidInput

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
