"""The agent's Kubernetes I/O, behind one small interface.

:class:`AgentClient` is everything the agent does against the API server; :class:`MemoryClient`
keeps the objects in memory (tests, demos, ``report --once``); the lightkube implementation is in
:mod:`devshare.agent.kubeclient`. Objects are plain dicts, as the API serves them.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable
from typing import Any, Protocol

from devshare.kube.store import merge_patch


class WriteRefused(Exception):
    """The API refused a write for good (an admission webhook or policy, an invalid change)."""


class AgentClient(Protocol):
    def get_device(self, name: str) -> dict[str, Any] | None:
        """The Device object named ``name`` (the node), or None."""
        ...

    def put_device(self, obj: dict[str, Any]) -> None:
        """Create the Device object, or replace its spec and annotations."""
        ...

    def patch_node_status(self, node: str, capacity: dict[str, str], allocatable: dict[str, str]) -> None:
        """Merge these extended resources into the Node's status.capacity / status.allocatable."""
        ...

    def patch_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
        """Merge these labels into the Node's (None: remove the label)."""
        ...

    def list_node_pods(self, node: str) -> list[dict[str, Any]]:
        """Every pod bound to ``node`` (spec.nodeName)."""
        ...

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str | None], *,
                              uid: str | None = None) -> None:
        """Merge these annotations into the pod's (None: remove). ``uid``: only if the pod is still that
        one. Raises LookupError when the pod is gone (or is another one now), :class:`WriteRefused`
        when the API refuses the change for good (admission); anything else may pass on retry."""
        ...

    def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        """Create a core v1 Event (a pod's container over its GPU memory share)."""
        ...


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
