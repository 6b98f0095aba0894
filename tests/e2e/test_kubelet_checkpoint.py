"""The checkpoint fixtures of tests/agent/test_checkpoint.py are what kubelet's device manager writes:
made again here with kubelet-harness (k8s.io/kubernetes' pkg/kubelet/cm/devicemanager, the suite's
Kubernetes version), read by devshare as the device manager itself reports them, and of the same
shape as the committed ones (a Kubernetes bump that changes the format fails here: regenerate them
with the command in tests/e2e/kubelet_fixtures.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from devshare.agent.checkpoint import held_outside, read_checkpoint
from e2e.cluster import binaries
from e2e.kubelet import CHECKPOINT, HARNESS
from e2e.kubelet_fixtures import OTHER, UUIDS, generate

COMMITTED = Path(__file__).resolve().parents[1] / "agent" / "fixtures" / "kubelet-v1.37.2"


def shape(obj: Any) -> Any:
    """Keys and value types, lists by the union of their items' shapes."""
    if isinstance(obj, dict):
        return {k: shape(v) for k, v in sorted(obj.items())} if not all(k.lstrip("-").isdigit() for k in obj) \
            else {"<numa>": shape(next(iter(obj.values())))} if obj else {}
    if isinstance(obj, list):
        shapes = {json.dumps(shape(x), sort_keys=True) for x in obj}
        return sorted(shapes)
    return type(obj).__name__


def test_fixtures_are_what_kubelet_writes(tmp_path: Path) -> None:
    view = generate(binaries() / HARNESS, tmp_path)
    fresh = json.loads((tmp_path / CHECKPOINT).read_text())
    committed = json.loads((COMMITTED / CHECKPOINT).read_text())
    assert shape(fresh) == shape(committed)
    entries = read_checkpoint(tmp_path / CHECKPOINT)
    want = sorted((p["uid"], c["name"], r, tuple(sorted(ids))) for p in view["pods"] for c in p["containers"]
                  for r, ids in c["devices"].items())
    assert sorted((e.pod_uid, e.container, e.resource, tuple(sorted(e.device_ids))) for e in entries) == want
    held = held_outside(entries, known_ids=set(UUIDS), own_resources={r for _, _, r, _ in want if r != OTHER})
    assert [h["resourceName"] for h in held] == [OTHER]
