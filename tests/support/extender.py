"""Builders for the extender's tests: cluster objects, a flaky backend, a running server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from aiohttp.test_utils import TestClient, TestServer

from devshare.kube.backend import Kind, ListResult, WatchEvent
from devshare.kube.errors import Unavailable
from devshare.kube.memory import MemoryBackend
from devshare.model.device import DeviceInfo, NodeDevices, device_object
from devshare.server.extender.serve import RUNTIME, ExtenderOptions, Runtime, build_app
from support.waiting import eventually, settled

GiB = 2**30


def node(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})}}


def device(name: str, gpus: int = 4, memory: int = 16 * GiB, unhealthy: tuple[int, ...] = ()) -> dict[str, Any]:
    devs = tuple(DeviceInfo(type="gpu", minor=i, id=f"GPU-{name}-{i}", memory=memory, health=i not in unhealthy)
                 for i in range(gpus))
    return device_object(NodeDevices(node=name, devices=devs))


def pod(name: str, *, core: int | None = None, mem: str | None = None, gpus: int | None = None,
        ns: str = "default", uid: str | None = None, node_name: str | None = None, priority: int | None = None,
        annotations: dict[str, str] | None = None, resource_version: str | None = None) -> dict[str, Any]:
    """A pod asking (Koordinator names) ``core`` percent and ``mem`` of one GPU, or ``gpus`` whole GPUs."""
    limits: dict[str, str] = {}
    if core is not None:
        limits["koordinator.sh/gpu-core"] = str(core)
    if mem is not None:
        limits["koordinator.sh/gpu-memory"] = mem
    elif core is not None:
        limits["koordinator.sh/gpu-memory-ratio"] = str(core)
    if gpus is not None:
        limits["nvidia.com/gpu"] = str(gpus)
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid or f"uid-{ns}-{name}"}
    if annotations:
        meta["annotations"] = dict(annotations)
    if resource_version:
        meta["resourceVersion"] = resource_version
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]}
    if node_name:
        spec["nodeName"] = node_name
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def cluster(nodes: int = 3, gpus: int = 4, memory: int = 16 * GiB, pods: list[dict[str, Any]] | None = None,
            no_device_nodes: int = 0) -> MemoryBackend:
    objs: list[dict[str, Any]] = []
    for i in range(nodes):
        objs += [node(f"node-{i}"), device(f"node-{i}", gpus, memory)]
    objs += [node(f"plain-{i}") for i in range(no_device_nodes)]
    return MemoryBackend.from_objects([*objs, *(pods or [])])


class FlakyBackend:
    """A memory backend whose patches and bindings fail at random (and take a random moment)."""

    def __init__(self, inner: MemoryBackend, *, fail_rate: float, seed: int, delay: float = 0.002) -> None:
        self.inner = inner
        self.rng = random.Random(seed)
        self.fail_rate = fail_rate
        self.delay = delay
        self.failures = 0

    @property
    def namespace(self) -> str:
        return self.inner.namespace

    async def _maybe_fail(self, what: str) -> None:
        await asyncio.sleep(self.rng.random() * self.delay)
        if self.rng.random() < self.fail_rate:
            self.failures += 1
            raise Unavailable(f"injected failure of {what}")

    async def list(self, kind: Kind) -> ListResult:
        return await self.inner.list(kind)

    def watch(self, kind: Kind, resource_version: str) -> AsyncIterator[WatchEvent]:
        return self.inner.watch(kind, resource_version)

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.inner.get_pod(namespace, name)

    async def patch_pod_annotations(self, namespace: str, name: str,
                                    annotations: Mapping[str, str | None]) -> dict[str, Any]:
        await self._maybe_fail("patch")
        return await self.inner.patch_pod_annotations(namespace, name, annotations)

    async def bind_pod(self, namespace: str, name: str, node: str, *, uid: str | None = None,
                       annotations: Mapping[str, str] | None = None, resource_version: str | None = None) -> None:
        await self._maybe_fail("bind")
        await self.inner.bind_pod(namespace, name, node, uid=uid, annotations=annotations,
                                  resource_version=resource_version)

    async def delete_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        await self.inner.delete_pod(namespace, name, uid=uid)

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.inner.get_lease(namespace, name)

    async def create_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        return await self.inner.create_lease(namespace, lease)

    async def replace_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        return await self.inner.replace_lease(namespace, lease)

    async def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        await self.inner.record_event(namespace, event)

    async def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.inner.get_config_map(namespace, name)

    async def create_config_map(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.inner.create_config_map(namespace, obj)

    async def replace_config_map(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.inner.replace_config_map(namespace, obj)

    async def close(self) -> None:
        pass  # the inner backend outlives restarts


class Switch:
    """A leadership a test turns on and off (:class:`~devshare.server.extender.view.Leadership`)."""

    def __init__(self, leading: bool = True) -> None:
        self.leading = leading

    def may_write(self) -> bool:
        return self.leading

    async def check(self) -> str | None:
        return None if self.leading else "not the leader"


@contextlib.asynccontextmanager
async def running(backend: Any, options: ExtenderOptions | None = None, *, wait_synced: bool = True,
                  leadership: Switch | None = None, clock: Callable[[], float] = time.monotonic,
                  ) -> AsyncIterator[tuple[TestClient[Any, Any], Runtime]]:
    """The extender app on a real local port, with a client; the state synced unless told not to.
    ``leadership``, ``clock``: given to the extender at construction (default: it always leads, real time)."""
    app = build_app(backend, options, leadership=leadership, clock=clock)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        runtime = app[RUNTIME]
        if wait_synced:
            await settled(runtime.informer.synced.wait())
        yield client, runtime
    finally:
        await client.close()


async def settle(runtime: Runtime, backend: MemoryBackend) -> None:
    """Wait until the state's watch has caught up with every write to the backend."""
    want = _pods_rv(backend)
    await eventually(lambda: int(runtime.informer.resource_versions.get("pods") or 0) >= want,
                     what=f"the watch of pods to reach resourceVersion {want}")


async def resolve_claims(runtime: Runtime, rounds: int = 50) -> None:
    """Release every claim of a pod that is not bound (as the leader's sweep does once claims are
    older than their TTL): claims of binds whose outcome was unknown, e.g. of an extender restarted
    since. Retried while the backend fails (a flaky one)."""
    claims, sweep = runtime.claims, runtime.extender.sweep
    assert claims is not None and sweep is not None
    ttl, claims.ttl = claims.ttl, 0.0
    try:
        for _ in range(rounds):
            await sweep.sweep(leading=True)
            held = claims.current.claims.values() if claims.current is not None else ()
            if not claims.stubs and all(c.pod in runtime.state.pods for c in held):
                return
    finally:
        claims.ttl = ttl


def _pods_rv(backend: MemoryBackend) -> int:
    items = backend.store.objects.get("pods", {})
    return max((int(o["metadata"].get("resourceVersion") or 0) for o in items.values()), default=0)


# --- the HTTP verbs as kube-scheduler sends them


def names_body(p: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    """What kube-scheduler sends with nodeCacheCapable: true (Nodes present and null)."""
    return {"Pod": p, "Nodes": None, "NodeNames": nodes}


def nodes_body(p: dict[str, Any], nodes: list[str]) -> dict[str, Any]:
    """What kube-scheduler sends with nodeCacheCapable: false (a full v1 NodeList)."""
    return {"Pod": p, "Nodes": {"kind": "NodeList", "apiVersion": "v1", "metadata": {},
                                "items": [node(n) for n in nodes]}, "NodeNames": None}


async def post(client: Any, path: str, body: Any, status: int = 200) -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = await client.post(path, data=data, headers={"Content-Type": "application/json"})
    assert r.status == status, await r.text()
    return await r.json()


async def bind(client: Any, name: str, node_name: str, ns: str = "default", uid: str | None = None) -> str:
    body = {"PodName": name, "PodNamespace": ns, "PodUID": uid or f"uid-{ns}-{name}", "Node": node_name}
    out = await post(client, "/bind", body)
    assert set(out) == {"Error"}
    return str(out["Error"])


def full_node_pods(node_name: str, gpus: int, *, priority: int = 0, prefix: str = "busy") -> list[dict[str, Any]]:
    """Bound pods holding every GPU of a node whole."""
    out = []
    for minor in range(gpus):
        alloc = {"node": node_name, "containers": [{"name": "main", "devices": [
            {"type": "gpu", "minor": minor, "id": f"GPU-{node_name}-{minor}", "core": 100, "memory": 16 * GiB,
             "memoryRatio": 100}]}]}
        out.append(pod(f"{prefix}-{node_name}-{minor}", gpus=1, node_name=node_name, priority=priority,
                       annotations={"devshare.io/allocation": json.dumps(alloc)}))
    return out


def write_cluster(path: Path, objs: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(objs, sort_keys=False))
    return path


def bound_pod() -> dict[str, Any]:
    alloc = {"node": "node-0", "containers": [{"name": "main", "devices": [
        {"type": "gpu", "minor": 1, "id": "GPU-node-0-1", "core": 50, "memory": 2**33, "memoryRatio": 50}]}]}
    return pod("bound", core=50, node_name="node-0", annotations={"devshare.io/allocation": json.dumps(alloc)})
