"""cli.snapshot.load_state (``devshare inspect``/``schedule``) and loading cluster files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from devshare.cli.snapshot import load_state
from devshare.kube.backend import Kind, ListResult
from devshare.kube.errors import Unavailable
from devshare.kube.memory import MemoryBackend
from devshare.model.errors import InvalidInput
from support.extender import FlakyBackend, cluster, device, node, pod


def bound() -> dict:
    alloc = {"node": "node-0", "containers": [{"name": "main", "devices": [
        {"type": "gpu", "minor": 1, "id": "GPU-node-0-1", "core": 50, "memory": 2**33, "memoryRatio": 50}]}]}
    return pod("b", core=50, node_name="node-0", annotations={"devshare.io/allocation": json.dumps(alloc)})


async def test_load_state_rebuilds_bound_pods_from_their_annotations() -> None:
    state = await load_state(cluster(2, gpus=2, pods=[bound(), pod("pending", core=10)]))
    assert sorted(state.row_of) == ["node-0", "node-1"]
    assert list(state.pods) == ["default/b"] and state.pods["default/b"].phase == "bound"
    assert state.pods["default/b"].allocation.node == "node-0"


class NeverLists(FlakyBackend):
    async def list(self, kind: Kind) -> ListResult:
        raise Unavailable("connection refused")


async def test_load_state_times_out_with_a_clear_message() -> None:
    backend = NeverLists(cluster(1), fail_rate=0.0, seed=0)
    with pytest.raises(InvalidInput, match=r"could not read the cluster within 0\.3 seconds"):
        await load_state(backend, timeout=0.3)


def test_cluster_file_loads_with_the_fast_loader_and_errors_name_the_document(tmp_path: Path) -> None:
    objs = [node("node-0"), device("node-0", 2), bound()]
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    backend = MemoryBackend.load(f)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in backend.objects()) == [
        ("Device", "node-0"), ("Node", "node-0"), ("Pod", "b")]
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(node("n")) + "---\nkind: [unclosed\n")
    with pytest.raises(InvalidInput, match=r"bad.yaml, document 2, line \d+, column \d+: not valid YAML"):
        MemoryBackend.load(bad)
