"""Per-container GPU usage: what each container really uses of the share it was given.

Each round (:class:`UsageReader`):

1. the driver lists, per GPU, the processes running on it, the memory each holds and its SM
   utilization (:meth:`~devshare.agent.inventory.Backend.processes`: NVML's running processes and
   process utilization samples; the fake backend's ``processes``);
2. each process's cgroup (``<proc>/<pid>/cgroup``, :mod:`devshare.agent.cgroups`) names its pod's UID
   and its container's ID;
3. the container ID is looked up in the node's pods, ``status.containerStatuses[].containerID``
   (and the init and ephemeral containers'): the pods the agent lists anyway. A container ID not
   found there (a container started or restarted since the last listing) makes the round list the
   pods again, once. kubelet's pod-resources API was the other way: it names a pod's devices but not
   its containers' IDs, so it could not map a process; and the listing needs no other socket, mount
   or permission;
4. per container and GPU: the memory of its processes, their utilization, beside what its
   allocation (``devshare.io/allocation``) gives it on that GPU.

A process whose cgroup cannot be read (it ended meanwhile, or ``--proc-root`` is not the host's
``/proc``), or that is no pod's (a host process), is counted under namespace, pod and container
``unknown``; one of a known pod whose container is not known yet under its pod and container
``unknown``: never dropped, so the figures of a GPU always add up to what its processes hold.

Every container holding a share of a GPU of the node gets a row, used or not (an idle allocation
shows as 0 used). A container whose processes hold more memory on a GPU than its share of it is
*over its share* (:class:`OverShare`): counted once per episode, and reported with an Event.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from devshare.agent.cgroups import CgroupRef, container_id, read_cgroup
from devshare.agent.envs import memory_limit
from devshare.agent.inventory import Backend, GpuProcess, Inventory
from devshare.model import names
from devshare.model.codecs import decode_allocation
from devshare.model.errors import InvalidInput
from devshare.model.quantity import MIB
from devshare.model.request import WHOLE
from devshare.model.usage import ContainerUse, GpuUse, NodeUsage, usage_status

log = logging.getLogger("devshare.agent.usage")

UNKNOWN = "unknown"
TERMINAL = ("Succeeded", "Failed")
OVER_SHARE_REASON = "GPUMemoryOverShare"
GIB = 2**30


class ContainerUsage(msgspec.Struct, frozen=True, kw_only=True):
    """One container's use of one GPU, beside its share of it."""

    namespace: str
    pod: str
    container: str
    uuid: str  # the GPU's
    minor: int  # the GPU's (-1: a GPU discovery does not list)
    memory_used: int = 0  # bytes its processes hold on the GPU (those whose memory the driver reports)
    utilization: float | None = None  # share of the GPU's SMs its processes kept busy, 0..1; None: no samples
    processes: int = 0
    memory_allocated: int = 0  # bytes its allocation gives it on the GPU (0: none)
    core_allocated: float = 0.0  # share of the GPU's compute its allocation gives it, 0..1
    pod_uid: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.namespace, self.pod, self.container, self.uuid)

    @property
    def attributed(self) -> bool:
        """A container of a known pod (not ``unknown``)."""
        return self.container != UNKNOWN and self.pod != UNKNOWN

    @property
    def over_share(self) -> bool:
        return self.attributed and self.memory_used > self.memory_allocated


Owner = tuple[str, str, str, str]  # namespace, pod, container, pod uid
UNKNOWN_OWNER: Owner = (UNKNOWN, UNKNOWN, UNKNOWN, "")


class PodIndex:
    """The node's pods as the reader needs them: container IDs, pod UIDs, and the GPU shares."""

    def __init__(self, pods: Iterable[Mapping[str, Any]], node: str) -> None:
        self.containers: dict[str, Owner] = {}
        self.pods: dict[str, tuple[str, str]] = {}
        self.allocated: list[tuple[Owner, int, Any]] = []  # (owner, minor, grant)
        for p in pods:
            meta = p.get("metadata") or {}
            status = p.get("status") or {}
            spec = p.get("spec") or {}
            uid, ns, name = str(meta.get("uid", "")), str(meta.get("namespace", "")), str(meta.get("name", ""))
            if spec.get("nodeName") != node:
                continue
            self.pods[uid] = (ns, name)
            for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
                for cs in status.get(key) or []:
                    if isinstance(cs, dict) and cs.get("containerID"):
                        self.containers[container_id(str(cs["containerID"]))] = (ns, name, str(cs.get("name", "")), uid)
            if status.get("phase") in TERMINAL:
                continue
            try:
                alloc = decode_allocation({str(k): str(v) for k, v in (meta.get("annotations") or {}).items()})
            except InvalidInput:
                continue
            if alloc is None or alloc.node != node:
                continue
            for c in alloc.containers:
                for g in c.devices:
                    if g.type == names.GPU:
                        self.allocated.append(((ns, name, c.name, uid), g.minor, g))

    def owner(self, ref: CgroupRef | None) -> Owner:
        if ref is None:
            return UNKNOWN_OWNER
        if ref.container_id and ref.container_id in self.containers:
            return self.containers[ref.container_id]
        pod = self.pods.get(ref.pod_uid)
        if pod is not None:
            return (pod[0], pod[1], UNKNOWN, ref.pod_uid)
        return UNKNOWN_OWNER


def attribute(processes: Iterable[GpuProcess], refs: Mapping[int, CgroupRef | None], index: PodIndex,
              inv: Inventory) -> list[ContainerUsage]:
    """The rows of one round (module doc): every allocated container per GPU, and every owner of a
    process (``unknown`` ones included), with the processes' memory and utilization summed."""
    minor_of = {g.uuid: g.minor for g in inv.gpus}
    uuid_of = {g.minor: g.uuid for g in inv.gpus}
    rows: dict[tuple[str, str, str, str], dict[str, Any]] = {}

    def row(owner: Owner, uuid: str) -> dict[str, Any]:
        key = (owner[0], owner[1], owner[2], uuid)
        r = rows.get(key)
        if r is None:
            r = rows[key] = {"owner": owner, "uuid": uuid, "memory": 0, "sm": None, "n": 0, "alloc": 0, "core": 0}
        return r

    for owner, minor, g in index.allocated:
        uuid = uuid_of.get(minor)
        if uuid is None:
            continue
        r = row(owner, uuid)
        r["alloc"] += memory_limit(g, inv)
        r["core"] += g.core_milli
    for p in processes:
        r = row(index.owner(refs.get(p.pid)), p.uuid)
        r["n"] += 1
        r["memory"] += p.memory or 0
        if p.sm is not None:
            r["sm"] = (r["sm"] or 0.0) + p.sm
    out = []
    for r in rows.values():
        ns, pod, container, uid = r["owner"]
        sm = r["sm"]
        if sm is None and r["n"] == 0:
            sm = 0.0  # no process: it uses nothing
        out.append(ContainerUsage(
            namespace=ns, pod=pod, container=container, uuid=r["uuid"], minor=minor_of.get(r["uuid"], -1),
            memory_used=r["memory"], utilization=None if sm is None else min(sm, 100.0) / 100,
            processes=r["n"], memory_allocated=r["alloc"], core_allocated=min(r["core"], WHOLE) / WHOLE, pod_uid=uid))
    out.sort(key=lambda u: (u.minor, u.namespace, u.pod, u.container))
    return out


class UsageReader:
    """One round of the module doc over a backend, the host's ``/proc`` and the node's pods.
    ``pods(fresh)`` gives the node's pods (``fresh``: listed now, not from a recent listing)."""

    def __init__(self, backend: Backend, node: str, pods: Callable[[bool], list[dict[str, Any]]],
                 inventory: Callable[[], Inventory], *, proc: Path = Path("/proc")) -> None:
        self.backend = backend
        self.node = node
        self.pods = pods
        self.inventory = inventory
        self.proc = proc
        self.unreadable = 0  # processes of the last round whose cgroup could not be read

    def read(self) -> list[ContainerUsage]:
        processes = self.backend.processes()
        refs: dict[int, CgroupRef | None] = {}
        unreadable = 0
        for pid in {p.pid for p in processes}:
            try:
                refs[pid] = read_cgroup(self.proc, pid)
            except OSError:
                refs[pid] = None
                unreadable += 1
        self.unreadable = unreadable
        index = PodIndex(self.pods(False), self.node)
        if any(r is not None and r.container_id and r.container_id not in index.containers for r in refs.values()):
            index = PodIndex(self.pods(True), self.node)  # a container (re)started since the last listing
        return attribute(processes, refs, index, self.inventory())


class OverShare:
    """Containers over their memory share: episodes counted per (container, GPU)."""

    def __init__(self) -> None:
        self.active: set[tuple[str, str, str, str]] = set()
        self.counts: dict[tuple[str, str, str, str], int] = {}

    def update(self, rows: Iterable[ContainerUsage]) -> list[ContainerUsage]:
        """The rows that went over their share since the last round (each episode once). Counts of
        containers no longer present are dropped (their series end)."""
        rows = list(rows)
        over = {r.key: r for r in rows if r.over_share}
        new = [r for k, r in over.items() if k not in self.active]
        for r in new:
            self.counts[r.key] = self.counts.get(r.key, 0) + 1
        self.active = set(over)
        present = {r.key for r in rows}
        self.counts = {k: v for k, v in self.counts.items() if k in present}
        return new


def over_share_message(r: ContainerUsage) -> str:
    used = f"{r.memory_used / GIB:.2f} GiB"
    gpu = f"GPU {r.uuid} (minor {r.minor})"
    if not r.memory_allocated:
        return f"container {r.container} uses {used} of {gpu}, which its allocation does not give it"
    return (f"container {r.container} uses {used} of {gpu}, more than its share of "
            f"{r.memory_allocated / GIB:.2f} GiB")


def over_share_event(r: ContainerUsage, message: str, *, node: str, at: float) -> dict[str, Any]:
    """The Warning Event (``GPUMemoryOverShare``) on the pod of a container over its share."""
    stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{r.pod}.", "namespace": r.namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": r.namespace, "name": r.pod,
                           "uid": r.pod_uid, "fieldPath": f"spec.containers{{{r.container}}}"},
        "reason": OVER_SHARE_REASON, "type": "Warning", "message": message,
        "source": {"component": "devshare-agent", "host": node}, "reportingComponent": "devshare-agent",
        "reportingInstance": node, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


def summary(rows: Iterable[ContainerUsage], inv: Inventory, at: float) -> dict[str, Any]:
    """The Device object's ``status.usage`` (:mod:`devshare.model.usage`): per GPU what its processes
    use, and per container its use beside its share. Memory is rounded to MiB and utilization to
    hundredths, so an idle node publishes the same block again (no write)."""
    per_gpu: dict[str, list[ContainerUsage]] = {}
    for r in rows:
        per_gpu.setdefault(r.uuid, []).append(r)
    gpus = []
    for g in inv.gpus:
        mine = per_gpu.get(g.uuid, [])
        utils = [r.utilization for r in mine if r.utilization is not None]
        gpus.append(GpuUse(
            minor=g.minor, id=g.uuid, memory_used=sum(r.memory_used for r in mine) // MIB * MIB,
            utilization=round(min(sum(utils), 1.0), 2) if utils or not mine else None,
            containers=tuple(ContainerUse(
                pod=f"{r.namespace}/{r.pod}", container=r.container, memory_used=r.memory_used // MIB * MIB,
                memory_allocated=r.memory_allocated,
                utilization=None if r.utilization is None else round(r.utilization, 2),
                core_allocated=round(r.core_allocated, 3)) for r in mine)))
    stamp = datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return usage_status(NodeUsage(at=stamp, gpus=tuple(gpus)))


class UsageMonitor:
    """Reads the usage every ``interval`` seconds; keeps the last rows (for the metrics), reports each
    container that goes over its share with an Event, and refreshes the Device object's usage block
    every ``publish_interval`` seconds (the reporter publishes it with the Device)."""

    def __init__(self, reader: UsageReader, *, node: str, event: Callable[[ContainerUsage, str], None] | None = None,
                 interval: float = 10.0, publish_interval: float = 60.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.reader = reader
        self.node = node
        self.event = event
        self.interval = interval
        self.publish_interval = publish_interval
        self.clock = clock
        self.wall = wall
        self.over = OverShare()
        self.rows: list[ContainerUsage] = []
        self.read_seconds = 0.0  # how long the last round took (wall clock)
        self.failures = 0
        self.status: dict[str, Any] | None = None  # the Device's status.usage
        self._published_at: float | None = None
        self._lock = threading.Lock()

    def round(self) -> list[ContainerUsage]:
        t0 = self.clock()
        rows = self.reader.read()
        new = self.over.update(rows)
        now = self.clock()
        with self._lock:
            self.rows = rows
            self.read_seconds = now - t0
            if self._published_at is None or now - self._published_at >= self.publish_interval:
                self.status = summary(rows, self.reader.inventory(), self.wall())
                self._published_at = now
        for r in new:
            message = over_share_message(r)
            log.warning("pod %s/%s: %s", r.namespace, r.pod, message)
            if self.event is not None:
                try:
                    self.event(r, message)
                except Exception as e:
                    log.warning("cannot report pod %s/%s over its GPU memory share as an Event: %s", r.namespace,
                                r.pod, e)
        return rows

    def snapshot(self) -> tuple[list[ContainerUsage], dict[tuple[str, str, str, str], int], float, int]:
        """(rows, over-share counts, the last round's seconds, processes whose cgroup was unreadable)."""
        with self._lock:
            return list(self.rows), dict(self.over.counts), self.read_seconds, self.reader.unreadable

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.round()
            except Exception:
                self.failures += 1
                log.exception("reading the GPU usage failed; retrying in %.0fs", self.interval)
            stop.wait(self.interval)
