"""Builders for the agent tests: fake node descriptions and pods carrying devshare allocations."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from devshare.kube.store import merge_patch
from devshare.model import names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.codecs import encode_allocation
from support import REPO

TOPOLOGIES = REPO / "examples" / "topologies"
GIB = 2**30


def write_fake(path: Path, **fields: Any) -> Path:
    data: dict[str, Any] = {"gpus": 4, "memory": "16Gi", "model": "Tesla-T4"}
    data.update(fields)
    path.write_text(yaml.safe_dump(data))
    return path


def gpu(minor: int, uuid: str, core: int = 1000, memory: int = 0, ratio: int = 0) -> DeviceGrant:
    return DeviceGrant(type=names.GPU, minor=minor, id=uuid, core_milli=core, memory=memory,
                       memory_ratio_milli=ratio)


def pod(
    name: str,
    node: str,
    containers: list[tuple[str, dict[str, Any], list[DeviceGrant]]],
    *,
    uid: str | None = None,
    init: list[tuple[str, dict[str, Any], list[DeviceGrant]]] = (),  # type: ignore[assignment]
    annotations: dict[str, str] | None = None,
    phase: str = "Pending",
    namespace: str = "default",
) -> dict[str, Any]:
    """A pod bound to ``node`` with per container (name, limits, grants) and its devshare allocation."""
    alloc = PodAllocation(
        node=node,
        containers=tuple(ContainerAllocation(name=c, devices=tuple(g)) for c, _, g in [*init, *containers]),
    )
    ann = {names.ALLOCATION: encode_allocation(alloc)}
    ann.update(annotations or {})

    def spec(items: Any) -> list[dict[str, Any]]:
        return [{"name": c, "image": "cuda", "resources": {"limits": {k: str(v) for k, v in lim.items()}}}
                for c, lim, _ in items]

    body: dict[str, Any] = {"nodeName": node, "containers": spec(containers)}
    if init:
        body["initContainers"] = spec(init)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "annotations": ann},
        "spec": body,
        "status": {"phase": phase},
    }


class MemoryClient:
    """An :class:`AgentClient` over objects held in memory."""

    def __init__(self, objects: Iterable[dict[str, Any]] = ()) -> None:
        self._lock = threading.Lock()
        self.devices: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[str] = []
        self.events: list[dict[str, Any]] = []
        for obj in objects:
            self.add(obj)

    def add(self, obj: dict[str, Any]) -> None:
        kind = obj.get("kind")
        meta = obj.setdefault("metadata", {})
        with self._lock:
            if kind == "Device":
                self.devices[meta["name"]] = copy.deepcopy(obj)
            elif kind == "Node":
                self.nodes[meta["name"]] = copy.deepcopy(obj)
            elif kind == "Pod":
                self.pods[(meta.get("namespace", "default"), meta["name"])] = copy.deepcopy(obj)

    def get_device(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self.devices.get(name)
            return copy.deepcopy(obj) if obj is not None else None

    def put_device(self, obj: dict[str, Any]) -> None:
        with self._lock:
            self.calls.append(f"put_device {obj['metadata']['name']}")
            self.devices[obj["metadata"]["name"]] = copy.deepcopy(obj)

    def patch_node_status(self, node: str, capacity: dict[str, str], allocatable: dict[str, str]) -> None:
        with self._lock:
            self.calls.append(f"patch_node_status {node}")
            obj = self.nodes.setdefault(node, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
            status = obj.setdefault("status", {})
            status.setdefault("capacity", {}).update(capacity)
            status.setdefault("allocatable", {}).update(allocatable)

    def patch_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
        with self._lock:
            self.calls.append(f"patch_node_labels {node}")
            obj = self.nodes.setdefault(node, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
            obj["metadata"]["labels"] = merge_patch(obj["metadata"].get("labels") or {}, labels)

    def list_node_pods(self, node: str) -> list[dict[str, Any]]:
        with self._lock:
            return [copy.deepcopy(p) for p in self.pods.values() if (p.get("spec") or {}).get("nodeName") == node]

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str | None], *,
                              uid: str | None = None) -> None:
        with self._lock:
            self.calls.append(f"patch_pod_annotations {namespace}/{name}")
            pod = self.pods.get((namespace, name))
            if pod is None or (uid is not None and pod["metadata"].get("uid") != uid):
                raise LookupError(f"pod {namespace}/{name} not found")
            pod["metadata"]["annotations"] = merge_patch(pod["metadata"].get("annotations") or {}, annotations)

    def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        with self._lock:
            self.calls.append(f"record_event {namespace}/{event['involvedObject']['name']}")
            self.events.append(copy.deepcopy(event))
