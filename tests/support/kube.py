"""Kubernetes objects (plain dicts) for the kube tests: Nodes, Devices, Pods with allocations."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.engine.watched import WatchedCluster
from devshare.kube.backend import KINDS, Backend, WatchEvent
from devshare.kube.informer import Backoff, Informer
from devshare.kube.memory import MemoryBackend
from support.waiting import settled

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


class Following:
    """The informer feeding the engine's watched cluster, as the extender runs them (without the extender)."""

    def __init__(self, backend: Backend, state: ClusterState | None = None, *, scheduler_name: str | None = None,
                 backoff: Callable[[], Backoff] | None = None) -> None:
        self.state = state if state is not None else ClusterState()
        self.lifecycle = Lifecycle(Scheduler(self.state))
        self.cluster = WatchedCluster(self.lifecycle, clock=time.monotonic, scheduler_name=scheduler_name)
        self.informer = Informer(backend, [self.cluster], backoff=backoff or fast_backoff)

    def listed(self, backend: MemoryBackend) -> Following:
        """Every kind of ``backend`` listed into the cluster at once (no informer running)."""
        for kind in KINDS:
            self.cluster.listed(kind, backend.store.list(kind)[0], initial=True)
        return self

    def replay(self, backend: MemoryBackend, since: int) -> int:
        """Every change of ``backend`` after version ``since`` applied as watch events; the version now."""
        for kind in KINDS:
            for ev in backend.store.events_since(kind, since):
                self.informer.apply_event(kind, WatchEvent(ev.type, ev.object))
        return backend.store.rv


def fast_backoff() -> Backoff:
    return Backoff(initial=0.01, maximum=0.05)


@contextlib.asynccontextmanager
async def following(backend: Backend, state: ClusterState | None = None, **kw: Any) -> AsyncIterator[Following]:
    """:class:`Following` running, synced."""
    f = Following(backend, state, **kw)
    f.informer.start()
    try:
        await settled(f.informer.synced.wait())
        yield f
    finally:
        await f.informer.stop()


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
