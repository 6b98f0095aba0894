"""Kubernetes objects (plain dicts) for the kube tests: Nodes, Devices, Pods with allocations."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

GiB = 2**30


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})},
            "status": {"allocatable": {"cpu": "32", "memory": "128Gi"}}}


def device(name: str, gpus: int = 4, *, memory_gib: int = 16, unhealthy: Sequence[int] = ()) -> dict[str, Any]:
    return {
        "apiVersion": "devshare.io/v1alpha1", "kind": "Device", "metadata": {"name": name},
        "spec": {"devices": [
            {"type": "gpu", "minor": i, "id": f"GPU-{name}-{i}", "health": i not in unhealthy,
             "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": f"{memory_gib}Gi",
                           "koordinator.sh/gpu-memory-ratio": "100"}}
            for i in range(gpus)]},
    }


def allocation(node_name: str, grants: Sequence[tuple[int, int, int]], container: str = "main") -> str:
    """DESIGN.md's ``devshare.io/allocation`` JSON: grants are (minor, core %, memory GiB)."""
    return json.dumps({"node": node_name, "containers": [{"name": container, "devices": [
        {"type": "gpu", "minor": m, "id": f"GPU-{node_name}-{m}", "core": core, "memory": mem * GiB,
         "memoryRatio": 0} for m, core, mem in grants]}]})


def pod(
    name: str,
    *,
    ns: str = "default",
    core: int = 50,
    memory_gib: int = 8,
    count: int = 1,
    node_name: str | None = None,
    grants: Sequence[tuple[int, int, int]] | None = None,
    annotations: dict[str, str] | None = None,
    phase: str | None = None,
    uid: str | None = None,
    cpu: str | None = None,
) -> dict[str, Any]:
    """A pod asking ``count`` GPUs with ``core`` % and ``memory_gib`` each (and ``cpu`` cores); bound to
    ``node_name`` with the allocation annotation when ``grants`` are given."""
    ann = dict(annotations or {})
    if grants is not None:
        assert node_name is not None
        ann["devshare.io/allocation"] = allocation(node_name, grants)
    requests: dict[str, str] = {"koordinator.sh/gpu-core": str(core * count),
                                "koordinator.sh/gpu-memory": f"{memory_gib * count}Gi"}
    if cpu is not None:
        requests["cpu"] = cpu
    obj: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": ann},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "resources": {"requests": requests, "limits": dict(requests)}}]},
    }
    if uid is not None:
        obj["metadata"]["uid"] = uid
    if node_name is not None:
        obj["spec"]["nodeName"] = node_name
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj


def plain_pod(name: str, *, node_name: str | None = None, cpu: str = "1", memory: str = "1Gi", ns: str = "default",
              scheduler: str | None = None, phase: str | None = None) -> dict[str, Any]:
    """A pod asking for no device, only CPU and memory (bound to ``node_name`` when given)."""
    obj: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "main", "image": "busybox",
                                 "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
    }
    if scheduler is not None:
        obj["spec"]["schedulerName"] = scheduler
    if node_name is not None:
        obj["spec"]["nodeName"] = node_name
    if phase is not None:
        obj["status"] = {"phase": phase}
    return obj
