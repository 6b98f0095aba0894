"""Cluster and pod objects as `devshare schedule`'s tests write them into files: a Node with a Device
of whole cards in Koordinator's resource names, and a pod of containers by their limits."""

from __future__ import annotations


def node(name: str, gpus: int, memory: str = "16Gi", labels: dict[str, str] | None = None) -> list[dict]:
    devices = [
        {"type": "gpu", "minor": i, "id": f"GPU-{name}-{i}", "health": True,
         "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": memory,
                       "koordinator.sh/gpu-memory-ratio": "100"}}
        for i in range(gpus)
    ]
    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}},
        {"apiVersion": "devshare.io/v1alpha1", "kind": "Device", "metadata": {"name": name},
         "spec": {"devices": devices}},
    ]



def pod(name: str, *limits: dict[str, str], annotations: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
        "spec": {"containers": [
            {"name": f"c{i}", "image": "x", "resources": {"limits": lim}} for i, lim in enumerate(limits)
        ]},
    }
