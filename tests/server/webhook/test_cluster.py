"""The device types the webhook knows of, from a --cluster file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from devshare.model.errors import InvalidInput
from devshare.server.webhook.cluster import ClusterFileDeviceTypes, types_in_documents
from devshare.server.webhook.validate import DEVICE_TYPE, judge
from support.webhook_pods import pod


def device(node: str, *types: str) -> dict[str, object]:
    return {
        "apiVersion": "devshare.io/v1alpha1",
        "kind": "Device",
        "metadata": {"name": node},
        "spec": {"devices": [{"type": t, "minor": i, "id": f"{t}-{i}", "health": True,
                              "resources": ({f"koordinator.sh/{t}": "100"} if t != "gpu" else
                                            {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "16Gi"})}
                             for i, t in enumerate(types)]},
    }


NODE = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}}


def write(path: Path, *docs: object) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_types_from_devices_only() -> None:
    assert types_in_documents([NODE, device("node-1", "gpu", "gpu"), device("node-2", "rdma")]) == {"gpu", "rdma"}
    assert types_in_documents([NODE]) is None  # no Device at all: unknown, the check is skipped
    assert types_in_documents([device("node-1")]) == frozenset()


def test_cluster_file_and_its_changes(tmp_path: Path) -> None:
    path = write(tmp_path / "cluster.yaml", NODE, device("node-1", "gpu"))
    source = ClusterFileDeviceTypes(path, interval=0)
    assert source.known_types() == {"gpu"}
    fpga = pod({"koordinator.sh/fpga": "100"})
    assert [p.reason for p in judge(fpga, source)] == [DEVICE_TYPE]
    assert judge(pod({"koordinator.sh/gpu": "50"}), source) == []

    write(path, NODE, device("node-1", "gpu"), device("node-2", "fpga"))
    os.utime(path, ns=(1, 1))  # a different mtime even within the clock's resolution
    assert source.known_types() == {"gpu", "fpga"}
    assert judge(fpga, source) == []

    path.write_text("kind: Device\nmetadata: [broken")  # a bad edit keeps what was known
    os.utime(path, ns=(2, 2))
    assert source.known_types() == {"gpu", "fpga"}


def test_bad_cluster_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("kind: Device\nmetadata: [broken")
    with pytest.raises(InvalidInput, match="YAML"):
        ClusterFileDeviceTypes(tmp_path / "a.yaml")
    bad = {"kind": "Device", "metadata": {"name": "n"}, "spec": {"devices": [{"minor": 0}]}}
    with pytest.raises(InvalidInput, match="document 1"):
        ClusterFileDeviceTypes(write(tmp_path / "b.yaml", bad))
    with pytest.raises(FileNotFoundError):
        ClusterFileDeviceTypes(tmp_path / "missing.yaml")
