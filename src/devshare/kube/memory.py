"""The in-memory backend: a cluster described by a multi-document YAML file (``--cluster FILE``).

The file holds Node, Device and Pod objects (a ``kind: List`` document is flattened). Pods without
``spec.nodeName`` are pending; :meth:`MemoryBackend.bind_pod` binds them in memory and
:meth:`MemoryBackend.save` writes every object back. Objects live in an
:class:`~devshare.kube.store.ObjectStore`, so lists and watches behave as with an API server and
the same informer (:mod:`devshare.kube.informer`) follows either backend.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path
from typing import Any

from devshare.kube.backend import Kind, ListResult, WatchEvent
from devshare.kube.errors import Conflict, NotFound
from devshare.kube.persist import encode_documents, read_documents, write_atomic
from devshare.kube.store import ObjectStore
from devshare.model import names
from devshare.model.device import parse_device
from devshare.model.errors import InvalidInput
from devshare.model.inventory import koordinator_device
from devshare.model.kubeobjects import meta, object_key
from devshare.model.node import parse_node

_RESOURCE_OF_KIND = {"Node": "nodes", "Device": "devices", "Pod": "pods"}
_API_VERSION = {"Node": "v1", "Device": names.DEVICE_API_VERSION, "Pod": "v1"}
_SAVED = ("nodes", "devices", "koorddevices", "pods")


def _resource(obj: dict[str, Any]) -> str | None:
    """Where an object is kept: Koordinator's Device (another API group, the same kind) apart."""
    if obj.get("kind") == "Device" and obj.get("apiVersion") == names.KOORD_DEVICE_API_VERSION:
        return "koorddevices"
    return _RESOURCE_OF_KIND.get(str(obj.get("kind")))


def _check(doc: Any, where: str) -> tuple[str, str, dict[str, Any]]:
    """Validate one object of a cluster file; returns (resource, key, object as stored)."""
    if not isinstance(doc, dict):
        raise InvalidInput(f"expected a Node, Device or Pod object (a mapping), got {type(doc).__name__}",
                           field=where)
    kind = doc.get("kind")
    if kind not in _RESOURCE_OF_KIND:
        raise InvalidInput(f"kind {kind!r} is not one of Node, Device, Pod (or List)", field=where)
    api = doc.get("apiVersion", _API_VERSION[kind])
    koord = kind == "Device" and api == names.KOORD_DEVICE_API_VERSION
    if api != _API_VERSION[kind] and not koord:
        raise InvalidInput(f"apiVersion of a {kind} must be {_API_VERSION[kind]}"
                           + (f" (or {names.KOORD_DEVICE_API_VERSION}, Koordinator's)" if kind == "Device" else "")
                           + f", got {api!r}", field=where)
    m = doc.get("metadata")
    if not isinstance(m, dict) or not isinstance(m.get("name"), str) or not m["name"]:
        raise InvalidInput(f"{kind} has no metadata.name", field=where)
    obj = copy.deepcopy(doc)
    obj["apiVersion"] = api
    try:
        if kind == "Node":
            parse_node(obj)
        elif koord:
            koordinator_device(obj)
        elif kind == "Device":
            parse_device(obj)
        else:
            ns = m.get("namespace") or "default"
            if not isinstance(ns, str):
                raise InvalidInput("metadata.namespace must be a string", field=f"Pod {m['name']}")
            obj["metadata"]["namespace"] = ns
            spec = obj.get("spec")
            if spec is not None and not isinstance(spec, dict):
                raise InvalidInput("spec must be a mapping", field=f"Pod {m['name']}")
            ann = m.get("annotations")
            if ann is not None and (not isinstance(ann, dict)
                                    or not all(isinstance(v, str) for v in ann.values())):
                raise InvalidInput("metadata.annotations must map names to strings (quote numbers)",
                                   field=f"Pod {m['name']}")
    except InvalidInput as e:
        raise InvalidInput(str(e), field=where) from None
    if kind != "Pod":
        obj["metadata"].pop("namespace", None)
    return "koorddevices" if koord else _RESOURCE_OF_KIND[kind], object_key(obj), obj


def _documents(path: Path) -> Iterable[tuple[str, Any]]:
    """(where, object) for every object of the file, lists flattened; YAML errors name the document."""
    for index, doc in enumerate(read_documents(path), start=1):
        if doc is None:
            continue
        where = f"{path}, document {index}"
        if isinstance(doc, dict) and doc.get("kind") == "List":
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise InvalidInput("items of a List must be a list", field=where)
            for j, item in enumerate(items):
                yield f"{where}, items[{j}]", item
        else:
            yield where, doc


class MemoryBackend:
    """A cluster held in memory. Also the backend tests and the simulator can drive directly."""

    def __init__(self, store: ObjectStore | None = None, *, namespace: str = "devshare-system",
                 source: str = "<memory>") -> None:
        self.store = store or ObjectStore()
        self.source = source
        self._namespace = namespace
        self._order: dict[tuple[str, str], None] = {}  # first-seen order of saved objects

    @property
    def namespace(self) -> str:
        return self._namespace

    # ------------------------------------------------------------------ loading and saving
    @classmethod
    def load(cls, path: str | Path) -> MemoryBackend:
        """Load a cluster file. Bad content raises InvalidInput naming the file and document."""
        p = Path(path)
        backend = cls(source=str(p))
        seen: dict[tuple[str, str], str] = {}
        for where, doc in _documents(p):
            resource, key, obj = _check(doc, where)
            if (resource, key) in seen:
                raise InvalidInput(f"{obj['kind']} {key} is already defined in {seen[resource, key]}",
                                   field=where)
            seen[resource, key] = where
            backend.apply(obj)
        return backend

    @classmethod
    def from_objects(cls, objects: Iterable[dict[str, Any]], **kw: Any) -> MemoryBackend:
        backend = cls(**kw)
        for i, obj in enumerate(objects, start=1):
            backend.apply(_check(obj, f"{backend.source}, object {i}")[2])
        return backend

    def objects(self) -> list[dict[str, Any]]:
        """Every Node, Device and Pod, in the order first seen (without resourceVersions): deep copies."""
        return copy.deepcopy(self.snapshot())

    def snapshot(self) -> list[dict[str, Any]]:
        """Like :meth:`objects` without copying: each object is a new shallow dict over the stored
        one (the store never changes an object in place), safe to encode in another thread."""
        out: list[dict[str, Any]] = []
        for resource in _SAVED:
            for key in self.store.objects.get(resource, {}):
                self._order.setdefault((resource, key), None)
        for resource, key in self._order:
            obj = self.store.get(resource, key)
            if obj is not None:
                m = {k: v for k, v in obj["metadata"].items() if k != "resourceVersion"}
                out.append({**obj, "metadata": m})
        return out

    def save(self, path: str | Path) -> None:
        """Write every object to ``path``, atomically (see :mod:`devshare.kube.persist`)."""
        write_atomic(Path(path), encode_documents(self.snapshot()))

    # ------------------------------------------------------------------ direct changes (tests, tools)
    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace a Node, Device or Pod object."""
        resource = _resource(obj)
        if resource is None:
            raise InvalidInput(f"kind {obj.get('kind')!r} is not one of Node, Device, Pod")
        key = object_key(obj)
        self._order.setdefault((resource, key), None)
        return self.store.put(resource, key, obj)

    def delete(self, kind: Kind, key: str) -> dict[str, Any]:
        """Delete an object (``key``: ``ns/name`` for pods, the name otherwise)."""
        return self.store.delete(kind, key)

    # ------------------------------------------------------------------ Backend
    async def list(self, kind: Kind) -> ListResult:
        items, rv = self.store.list(kind)
        return ListResult(items, rv)

    async def watch(self, kind: Kind, resource_version: str) -> AsyncIterator[WatchEvent]:
        rv = int(resource_version or 0)
        while True:
            for ev in self.store.events_since(kind, rv):
                rv = ev.rv
                yield WatchEvent(ev.type, ev.object)
            rv = max(rv, self.store.rv)
            await self.store.wait_change(rv)

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.get("pods", f"{namespace}/{name}")

    async def list_node_pods(self, namespace: str, node: str) -> list[dict[str, Any]]:
        """The pods of ``namespace`` bound to ``node``."""
        return [copy.deepcopy(o) for o in self.snapshot() if o.get("kind") == "Pod"
                and (o.get("metadata") or {}).get("namespace") == namespace
                and (o.get("spec") or {}).get("nodeName") == node]

    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> dict[str, Any]:
        return self.store.patch("pods", f"{namespace}/{name}", {"metadata": {"annotations": dict(annotations)}})

    def _pod(self, namespace: str, name: str) -> tuple[str, dict[str, Any]]:
        key = f"{namespace}/{name}"
        pod = self.store.get("pods", key)
        if pod is None:
            raise NotFound(f"pods {name!r} not found in namespace {namespace}", code=404)
        return key, pod

    async def bind_pod(self, namespace: str, name: str, node: str, *, uid: str | None = None,
                       annotations: Mapping[str, str] | None = None, resource_version: str | None = None) -> None:
        key, pod = self._pod(namespace, name)
        if uid and meta(pod).get("uid") not in (None, "", uid):
            raise Conflict(f"pod {key} has uid {meta(pod).get('uid')}, not {uid}", code=409)
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            raise Conflict(f"pod {key} is already assigned to node {bound!r}", code=409)
        if resource_version and meta(pod).get("resourceVersion") not in (None, "", resource_version):
            raise Conflict(f"pod {key} changed since resourceVersion {resource_version}", code=409)
        patch: dict[str, Any] = {"spec": {"nodeName": node}}
        if annotations:
            patch["metadata"] = {"annotations": dict(annotations)}
        self.store.patch("pods", key, patch)

    async def delete_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        key, pod = self._pod(namespace, name)
        if uid and meta(pod).get("uid") not in (None, "", uid):
            return
        self.store.delete("pods", key)

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.get("leases", f"{namespace}/{name}")

    async def create_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        return self.store.create("leases", f"{namespace}/{lease['metadata']['name']}", _namespaced(lease, namespace))

    async def replace_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        return self.store.update("leases", f"{namespace}/{lease['metadata']['name']}",
                                 _namespaced(lease, namespace), expect_rv=meta(lease).get("resourceVersion"))

    async def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        ev = _namespaced(event, namespace)
        self.store.put("events", f"{namespace}/{meta(ev).get('name', self.store.rv)}", ev)

    async def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.store.get("configmaps", f"{namespace}/{name}")

    async def create_config_map(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self.store.create("configmaps", f"{namespace}/{obj['metadata']['name']}", _namespaced(obj, namespace))

    async def replace_config_map(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self.store.update("configmaps", f"{namespace}/{obj['metadata']['name']}", _namespaced(obj, namespace),
                                 expect_rv=meta(obj).get("resourceVersion"))

    async def patch_node_taints(self, node: str, taints: list[dict[str, Any]], resource_version: str) -> dict[str, Any]:
        cur = self.store.get("nodes", node)
        if cur is None:
            raise NotFound(f"nodes {node!r} not found", code=404)
        obj = copy.deepcopy(cur)
        obj.setdefault("spec", {})["taints"] = copy.deepcopy(taints)
        return self.store.update("nodes", node, obj, expect_rv=resource_version)

    async def close(self) -> None:
        await asyncio.sleep(0)


def _namespaced(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    return {**obj, "metadata": {**meta(obj), "namespace": namespace}}
