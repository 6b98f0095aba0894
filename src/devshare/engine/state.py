"""Cluster state: nodes, their devices, pods and their allocations.

Usage is kept in the cluster-wide arrays of :mod:`devshare.engine.table`. A pod's allocation is
either *assumed* (reserved by the scheduler, waiting for its bind, expiring if the bind never
completes) or *bound*. After a restart the state is rebuilt from bound pods' annotations alone
(:meth:`ClusterState.add_bound`). When an assumed allocation is confirmed, forgotten or expired is
decided by :class:`devshare.engine.lifecycle.Lifecycle`; this module only counts.

Every change that could oversubscribe a device goes through :meth:`ClusterState.assume`, which
checks the allocation against the arrays first and refuses it whole (nothing half-applied).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

import msgspec
import numpy as np

from devshare.engine.admit import Ask, Card, Reason, card_reason, describe
from devshare.engine.caches import EngineCaches
from devshare.engine.table import DeviceTable
from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.device import NodeDevices
from devshare.model.node import NodeInfo
from devshare.model.request import PodRequest

Rows = np.ndarray[Any, np.dtype[np.int64]]  # node indexes
Mask = np.ndarray[Any, np.dtype[np.bool_]]  # one flag per row asked

DEFAULT_MAX_CONTAINERS = 16  # seed 000: MGPUMaxContainersPerCard
DEFAULT_ASSUME_TTL = 60.0  # seconds an assumed allocation waits for its bind

Phase = Literal["assumed", "bound"]
T = TypeVar("T")


class Conflict(Exception):
    """An allocation that no longer fits (another pod took the device first)."""


class PodRecord(msgspec.Struct, kw_only=True):
    pod: PodRequest
    allocation: PodAllocation
    phase: Phase
    expires_at: float | None = None
    hold: str | None = None  # a group plan's hold (the group key): devices kept for a member to come, no pod
    # placed by another scheduler (taking over a running cluster): whose annotations it was read from,
    # and what of it is counted conservatively (a card as full), for the log and /inspect
    peer: str | None = None
    problems: tuple[str, ...] = ()


FINISHED_KEPT = 4096  # pods remembered as gone or finished (a late bind confirmation is checked against them)


class DeviceColumns(msgspec.Struct, frozen=True):
    """Every device of one type, one entry each, in columns: a copy, so it may be read after the state
    changed (off the event loop). Compute in thousandths of a device, memory in bytes; ``memory`` is
    False for types without memory (RDMA, FPGA), whose memory columns are zeros."""

    type: str
    node: list[str]
    id: list[str]
    minor: np.ndarray[Any, np.dtype[np.int64]]
    total_core: np.ndarray[Any, np.dtype[np.int64]]
    used_core: np.ndarray[Any, np.dtype[np.int64]]
    total_mem: np.ndarray[Any, np.dtype[np.int64]]
    used_mem: np.ndarray[Any, np.dtype[np.int64]]
    containers: np.ndarray[Any, np.dtype[np.int64]]
    healthy: np.ndarray[Any, np.dtype[np.bool_]]
    held_outside: np.ndarray[Any, np.dtype[np.bool_]]
    memory: bool


class StateView(msgspec.Struct, frozen=True):
    """A copy of what the views over every device read (:func:`inspect_view`, /ui's occupancy, the
    per-card metrics): taken by :meth:`ClusterState.view` on the event loop in milliseconds, then read
    anywhere (a thread) while the state goes on changing. At 5,000 nodes of 8 GPUs building the
    views themselves takes hundreds of milliseconds: done on the event loop, every filter and bind
    would wait that long."""

    nodes: list[str]  # every node, sorted by name
    columns: list[DeviceColumns]  # every device, by type (sorted)
    pods: list[tuple[str, PodAllocation, Phase]]  # every record holding devices: key, allocation, phase
    max_containers: int
    # pods placed by other schedulers: key, node, whose annotations, what is counted conservatively
    peers: list[tuple[str, str, str, tuple[str, ...]]] = []


def inspect_view(view: StateView) -> dict[str, Any]:
    """DESIGN.md's inspect JSON: per node (by name), per device (by type, then minor), what is used
    and by whom."""
    by_device: dict[tuple[str, str, int], list[str]] = {}
    for key, alloc, _ in view.pods:
        for ci, g in alloc.grants():
            who = f"{key}/{alloc.containers[ci].name}"
            lst = by_device.setdefault((alloc.node, g.type, g.minor), [])
            if who not in lst:
                lst.append(who)
    devices_of: dict[str, list[dict[str, Any]]] = {name: [] for name in view.nodes}
    for c in view.columns:
        t = c.type
        for node, minor, id_, healthy, held, total_core, used_core, total_mem, used_mem, containers in zip(
                c.node, c.minor.tolist(), c.id, c.healthy.tolist(), c.held_outside.tolist(), c.total_core.tolist(),
                c.used_core.tolist(), c.total_mem.tolist(), c.used_mem.tolist(), c.containers.tolist(), strict=True):
            total: dict[str, Any] = {"core": total_core / 10}
            used: dict[str, Any] = {"core": used_core / 10}
            if c.memory:
                total["memory"], used["memory"] = total_mem, used_mem
            used["containers"] = containers
            devices_of[node].append({
                "type": t, "minor": minor, "id": id_, "health": healthy, "heldOutside": held,
                "total": total, "used": used, "pods": sorted(by_device.get((node, t, minor), [])),
            })
    out: dict[str, Any] = {"nodes": [{"name": name, "devices": devices_of[name]} for name in view.nodes]}
    if view.peers:  # taking over: the pods other schedulers placed, and what of them is counted conservatively
        out["placedByPeers"] = [{"pod": key, "node": node, "by": by, "problems": list(problems)}
                                for key, node, by, problems in sorted(view.peers)]
    return out


class ClusterState:
    def __init__(self, *, max_containers_per_device: int = DEFAULT_MAX_CONTAINERS) -> None:
        self.max_containers = max_containers_per_device
        self.nodes: dict[str, NodeInfo] = {}
        self.devices: dict[str, NodeDevices] = {}
        self.pods: dict[str, PodRecord] = {}
        # the CPU (milli) and memory (bytes) that bound pods holding no record here ask of their node:
        # pods of other schedulers, pods without devices, pods whose allocation is not counted. Node
        # CPU and memory are then what kube-scheduler counts, whoever placed what (issue 41)
        self.plain: dict[str, tuple[str, int, int]] = {}
        self._plain_of: dict[str, dict[str, tuple[int, int]]] = {}  # node -> key -> (cpu, memory)
        # per namespace, the GPU compute (thousandths) and memory (bytes) its records hold, assumed and
        # bound (the per-namespace quotas of devshare.engine.quotas read it)
        self.namespace_gpu: dict[str, list[int]] = {}
        self.finished: OrderedDict[tuple[str, str], None] = OrderedDict()  # (key, uid) of pods gone or done
        self.row_of: dict[str, int] = {}
        self.name_of: dict[int, str] = {}
        self._free_rows: list[int] = []
        self._rows = 0
        cap = 64
        self.active = np.zeros(cap, np.bool_)
        self.cpu_total = np.zeros(cap, np.int64)  # 0 = untracked
        self.cpu_used = np.zeros(cap, np.int64)
        self.mem_total = np.zeros(cap, np.int64)
        self.mem_used = np.zeros(cap, np.int64)
        self.rank = np.arange(cap, dtype=np.int64)  # tie-break order among equal scores (lowest wins)
        self.row_version = np.zeros(cap, np.int64)  # bumped whenever anything of that node changes
        self.tables: dict[str, DeviceTable] = {}
        self.bandwidth: dict[str, np.ndarray[Any, np.dtype[np.float64]]] = {}
        self.version = 0  # bumped on every change; caches key on it
        self.layout_version = 0  # bumped when nodes or devices change (not on usage changes)
        self.names_version = 0  # bumped when a node comes or goes (row_of changes)
        self.caches = EngineCaches(self)  # every cache of the engine, one invalidation rule
        self._all_rows: np.ndarray[Any, np.dtype[np.int64]] | None = None
        self._all_rows_key = -1

    def per_layout(self, key: Any, make: Callable[[], T]) -> T:
        """A value derived from the nodes and devices only (not from usage: totals, health, labels,
        bandwidth), made once and kept until a node or a device changes (:mod:`devshare.engine.caches`)."""
        return self.caches.per_layout(key, make)

    def gpu_model(self, row: int) -> str:
        """The node's GPU model: its label if set, else its Device's label (both the agent's), else its
        first GPU's model ("" when unknown)."""
        name = self.name_of.get(row, "")
        info = self.nodes.get(name)
        if info is not None and info.gpu_model:
            return info.gpu_model
        nd = self.devices.get(name)
        if nd is not None and nd.gpu_model:
            return nd.gpu_model
        t = self.tables.get(names.GPU)
        models = [m for m in (t.models[row] if t is not None and row < len(t.models) else []) if m]
        return models[0] if models else ""

    def card_model(self, table: DeviceTable, row: int, col: int) -> str:
        """One card's type: its model as the Device object gives it, else the node's GPU model label."""
        models = table.models[row] if row < len(table.models) else []
        model = models[col] if col < len(models) else ""
        if model:
            return model
        info = self.nodes.get(self.name_of.get(row, ""))
        return info.gpu_model if info is not None and info.gpu_model else ""

    # ------------------------------------------------------------------ nodes and devices
    def table(self, device_type: str) -> DeviceTable:
        t = self.tables.get(device_type)
        if t is None:
            t = DeviceTable(device_type, rows=self.active.shape[0])
            self.tables[device_type] = t
        return t

    def _new_row(self) -> int:
        if self._free_rows:
            return self._free_rows.pop()
        row = self._rows
        self._rows += 1
        if row >= self.active.shape[0]:
            cap = 2 * self.active.shape[0]
            for name in ("active", "cpu_total", "cpu_used", "mem_total", "mem_used"):
                old = getattr(self, name)
                new = np.zeros(cap, old.dtype)
                new[: old.shape[0]] = old
                setattr(self, name, new)
            rank = np.arange(cap, dtype=np.int64)
            rank[: self.rank.shape[0]] = self.rank
            self.rank = rank
            rv = np.zeros(cap, np.int64)
            rv[: self.row_version.shape[0]] = self.row_version
            self.row_version = rv
        for t in self.tables.values():
            t.ensure_rows(row + 1)
        return row

    @property
    def n_rows(self) -> int:
        return self._rows

    def upsert_node(self, info: NodeInfo) -> None:
        self.version += 1
        self.layout_version += 1
        row = self.row_of.get(info.name)
        if row is None:
            row = self._new_row()
            self.row_of[info.name] = row
            self.name_of[row] = info.name
            self.names_version += 1
            self._all_rows = None
        self.nodes[info.name] = info
        self.row_version[row] += 1
        self.active[row] = not info.unschedulable
        self.cpu_total[row] = info.cpu_milli
        self.mem_total[row] = info.memory_bytes
        nd = self.devices.get(info.name)
        self._load_devices(row, nd)

    def remove_node(self, name: str) -> None:
        """Drop a node and its devices. Pods placed there keep their allocation records."""
        row = self.row_of.pop(name, None)
        if row is None:
            return
        self.version += 1
        self.layout_version += 1
        self.names_version += 1
        del self.name_of[row]
        self._all_rows = None
        self.nodes.pop(name, None)
        self.active[row] = False
        self.row_version[row] += 1
        self.cpu_total[row] = self.cpu_used[row] = self.mem_total[row] = self.mem_used[row] = 0
        for t in self.tables.values():
            t.clear(row)
        self.bandwidth.pop(name, None)
        self._free_rows.append(row)

    def set_devices(self, nd: NodeDevices) -> None:
        """Publish a node's devices (a Device object appeared or changed). Takes effect at once."""
        self.version += 1
        self.layout_version += 1
        self.devices[nd.node] = nd
        row = self.row_of.get(nd.node)
        if row is not None:
            self._load_devices(row, nd)

    def remove_devices(self, node: str) -> None:
        self.version += 1
        self.layout_version += 1
        self.devices.pop(node, None)
        row = self.row_of.get(node)
        if row is not None:
            self._load_devices(row, None)

    def _load_devices(self, row: int, nd: NodeDevices | None) -> None:
        name = self.name_of[row]
        self.row_version[row] += 1
        types = set(self.tables)
        if nd is not None:
            types |= {d.type for d in nd.devices}
        for t in types:
            devs = nd.of_type(t) if nd is not None else ()
            self.table(t).set_devices(row, devs, nd.held_outside if nd is not None else ())
        self.cpu_used[row], self.mem_used[row] = self._plain_sum(name)
        self.bandwidth.pop(name, None)
        if nd is not None and nd.gpu_bandwidth is not None:
            m = np.asarray(nd.gpu_bandwidth, dtype=np.float64)
            self.bandwidth[name] = np.minimum(m, m.T)  # a pair's bandwidth: the smaller direction
        for rec in self.pods.values():
            if rec.allocation.node == name:
                self._apply(rec, +1)

    # ------------------------------------------------------------------ pods that hold no record
    def set_plain(self, key: str, node: str, cpu_milli: int, memory_bytes: int) -> None:
        """Count the CPU and memory of the bound pod ``key`` on ``node`` (replacing what was counted for
        it): a pod that holds no record here (another scheduler's, one asking no device, one whose
        allocation is not counted). A pod with a record is counted through it, never here too."""
        old = self.plain.get(key)
        if old == (node, cpu_milli, memory_bytes):
            return
        if old is not None:
            self.remove_plain(key)
        self.plain[key] = (node, cpu_milli, memory_bytes)
        self._plain_of.setdefault(node, {})[key] = (cpu_milli, memory_bytes)
        self._plain_usage(node, cpu_milli, memory_bytes)

    def remove_plain(self, key: str) -> None:
        """Stop counting the pod ``key`` set by :meth:`set_plain` (gone, finished, or now holding a record)."""
        old = self.plain.pop(key, None)
        if old is None:
            return
        node, cpu, memory = old
        on_node = self._plain_of.get(node)
        if on_node is not None:
            on_node.pop(key, None)
            if not on_node:
                del self._plain_of[node]
        self._plain_usage(node, -cpu, -memory)

    def _plain_usage(self, node: str, cpu: int, memory: int) -> None:
        row = self.row_of.get(node)
        if row is None:
            return  # counted when the node comes (_load_devices)
        self.cpu_used[row] += cpu
        self.mem_used[row] += memory
        self.row_version[row] += 1
        self.version += 1

    def _plain_sum(self, node: str) -> tuple[int, int]:
        on_node = self._plain_of.get(node)
        if not on_node:
            return 0, 0
        return sum(c for c, _ in on_node.values()), sum(m for _, m in on_node.values())

    # ------------------------------------------------------------------ usage accounting
    def _apply(self, rec: PodRecord, sign: int) -> None:
        row = self.row_of.get(rec.allocation.node)
        if row is None:
            return
        self.row_version[row] += 1
        self.cpu_used[row] += sign * rec.pod.cpu_milli
        self.mem_used[row] += sign * rec.pod.memory_bytes
        for u in rec.allocation.usage():
            t = self.tables.get(u.type)
            if t is None:
                continue
            col = t.column_of(row, u.minor)
            if col < 0:
                continue  # the device is gone; the record stays, nothing to count
            t.add_usage(row, col, u.core_milli, u.memory, sign, u.slots)

    def _count(self, rec: PodRecord, sign: int) -> None:
        """Add (sign +1) or take back (-1) a record's GPU compute and memory in its namespace's sum."""
        core = memory = 0
        for u in rec.allocation.usage():
            if u.type == names.GPU:
                core += u.core_milli
                memory += u.memory
        if not core and not memory:
            return
        acc = self.namespace_gpu.setdefault(rec.pod.namespace, [0, 0])
        acc[0] += sign * core
        acc[1] += sign * memory
        if acc == [0, 0]:
            del self.namespace_gpu[rec.pod.namespace]

    def cpu_short(self, rows: Rows | int, cpu_milli: int) -> Mask:
        """Per row (or for one row: a numpy bool): the node's CPU cannot take ``cpu_milli`` more (a
        node whose CPU is untracked, total 0, takes any). The one node-level CPU rule: the filter,
        reserve and the replay's kube-scheduler window all ask it."""
        total = self.cpu_total[rows]
        return (total > 0) & (self.cpu_used[rows] + cpu_milli > total)

    def memory_short(self, rows: Rows | int, memory: int) -> Mask:
        """Per row: the node's memory cannot take ``memory`` bytes more (untracked, total 0: any)."""
        total = self.mem_total[rows]
        return (total > 0) & (self.mem_used[rows] + memory > total)

    def why_not(self, pod: PodRequest, alloc: PodAllocation, *, ignore: str | None = None) -> str | None:
        """Why ``alloc`` cannot be added now (None when it fits). ``ignore``: a pod key not to count."""
        row = self.row_of.get(alloc.node)
        if row is None:
            return f"node {alloc.node} is not known"
        if not self.active[row]:
            return f"node {alloc.node} is unschedulable"
        back = self.pods.get(ignore) if ignore else None
        if back is not None and back.allocation.node != alloc.node:
            back = None  # counted on another node: nothing of it to take back here
        cpu, memory = pod.cpu_milli, pod.memory_bytes
        if back is not None:  # the same pod's record: its CPU and memory are counted already
            cpu, memory = cpu - back.pod.cpu_milli, memory - back.pod.memory_bytes
        if self.cpu_short(row, cpu):
            return f"node {alloc.node}: not enough CPU"
        if self.memory_short(row, memory):
            return f"node {alloc.node}: not enough memory"
        # per card: what the allocation adds (compute, memory, containers, whole), judged by the
        # filter's own predicate (devshare.engine.admit)
        for u in alloc.usage():
            dtype, minor, core, mem, slots, whole = u.type, u.minor, u.core_milli, u.memory, u.slots, u.whole
            t = self.tables.get(dtype)
            col = t.column_of(row, minor) if t is not None else -1
            if t is None or col < 0:
                return describe(Reason.ABSENT, f"{dtype} {minor}", total_core=0, total_mem=0, free_core=0,
                                free_mem=0, slots=0, core=core, memory=mem, max_containers=self.max_containers)
            used_core = int(t.used_core[row, col])
            used_mem = int(t.used_mem[row, col])
            used_slots = int(t.used_slots[row, col])
            if back is not None:
                for bu in back.allocation.usage():
                    if bu.type == dtype and bu.minor == minor:
                        used_core -= bu.core_milli
                        used_mem -= bu.memory
                        used_slots -= bu.slots
            total_core, total_mem = int(t.total_core[row, col]), int(t.total_mem[row, col])
            sel = pod.gpu_selection if dtype == names.GPU else None
            excluded = sel is not None and not sel.allows(t.ids[row][col], self.card_model(t, row, col))
            card = Card(True, bool(t.healthy[row, col]), bool(t.blocked[row, col]), total_core, total_mem,
                        total_core - used_core, total_mem - used_mem, used_slots, excluded)
            code = card_reason(card, Ask(core, mem, bool(whole), slots, self.max_containers))
            if code:
                return describe(code, f"{dtype} {minor}", total_core=total_core, total_mem=total_mem,
                                free_core=card.free_core, free_mem=card.free_mem, slots=used_slots, core=core,
                                memory=mem, max_containers=self.max_containers)
        return None

    # ------------------------------------------------------------------ accounting
    # (the assume/bind lifecycle over these is :class:`devshare.engine.lifecycle.Lifecycle`)
    def assume(self, pod: PodRequest, alloc: PodAllocation, *, now: float,
                ttl: float | None = DEFAULT_ASSUME_TTL, hold: str | None = None) -> None:
        """Assume ``alloc`` for ``pod`` until it is bound or ``now + ttl`` passes. All or nothing.
        ``hold``: the record is a group plan's hold (``pod`` is the plan's placeholder), not a pod."""
        key = pod.key
        if key in self.pods:
            raise Conflict(f"pod {key} already holds an allocation on {self.pods[key].allocation.node}")
        reason = self.why_not(pod, alloc)
        if reason is not None:
            raise Conflict(reason)
        rec = PodRecord(pod=pod, allocation=alloc, phase="assumed",
                        expires_at=None if ttl is None else now + ttl, hold=hold)
        self.pods[key] = rec
        self._apply(rec, +1)
        self._count(rec, +1)
        self.version += 1

    def bind(self, key: str) -> None:
        rec = self.pods.get(key)
        if rec is None:
            raise KeyError(f"pod {key} has no reserved allocation")
        rec.phase = "bound"
        rec.expires_at = None
        self.version += 1

    def release_finished(self, key: str, uid: str) -> PodRecord | None:
        """Release a pod the cluster says is gone or finished, and remember it (by key and uid), so that
        a bind confirmation arriving after the watch's events never records it again."""
        if uid:
            self.finished[(key, uid)] = None
            while len(self.finished) > FINISHED_KEPT:
                self.finished.popitem(last=False)
        return self.release(key)

    def is_finished(self, key: str, uid: str) -> bool:
        return bool(uid) and (key, uid) in self.finished

    def release(self, key: str) -> PodRecord | None:
        """Give back everything the pod holds (deleted, completed, or unreserved)."""
        rec = self.pods.pop(key, None)
        if rec is not None:
            self._apply(rec, -1)
            self._count(rec, -1)
            self.version += 1
        return rec

    def add_bound(self, pod: PodRequest, alloc: PodAllocation) -> str | None:
        """Record a bound pod's allocation (from its annotation). Returns a conflict message if the
        devices were already over-used, but records it anyway: the annotation is the truth."""
        old = self.pods.get(pod.key)
        if old is not None:
            if old.allocation == alloc:
                old.phase = "bound"
                old.expires_at = None
                return None
            self.release(pod.key)
        self.remove_plain(pod.key)  # counted through its record from now on
        reason = self.why_not(pod, alloc) if alloc.node in self.row_of else None
        rec = PodRecord(pod=pod, allocation=alloc, phase="bound")
        self.pods[pod.key] = rec
        self._apply(rec, +1)
        self._count(rec, +1)
        self.version += 1
        return reason

    def add_placed(self, pod: PodRequest, alloc: PodAllocation, *, peer: str,
                   problems: tuple[str, ...] = ()) -> str | None:
        """Record a pod another scheduler placed (its allocation read from that scheduler's annotations,
        :mod:`devshare.model.peers`). It is counted whole, never refused: the pod runs on those cards,
        so a card it over-books is counted beyond its capacity, that is as full, and nothing more is
        placed there until enough of it is freed. Returns the over-booking, if any (kept in the
        record's problems with the reading's own)."""
        old = self.pods.get(pod.key)
        if old is not None and old.allocation == alloc and old.peer == peer:
            old.problems = problems + tuple(p for p in old.problems if p.startswith("over-books:"))
            return None
        if old is not None:
            self.release(pod.key)
        reason = self.overbooking(alloc)
        if reason is not None:
            problems = (*problems, f"over-books: {reason}; counted in full (the card is full)")
        rec = PodRecord(pod=pod, allocation=alloc, phase="bound", peer=peer, problems=problems)
        self.pods[pod.key] = rec
        self._apply(rec, +1)
        self._count(rec, +1)
        self.version += 1
        return reason

    def overbooking(self, alloc: PodAllocation, *, ignore: str | None = None) -> str | None:
        """Whether ``alloc``, added to what is counted now, would book a card beyond its compute or
        memory (None when it would not, or when its node or cards are unknown: nothing to judge
        against). Unlike :meth:`why_not`, health, cordons, containers per card and node CPU do not
        matter: this is the rule for allocations already written on pods. ``ignore``: a pod key not
        to count (the same pod's earlier record)."""
        row = self.row_of.get(alloc.node)
        if row is None:
            return None
        back = self.pods.get(ignore) if ignore else None
        for u in alloc.usage():
            dtype, minor, core, mem = u.type, u.minor, u.core_milli, u.memory
            t = self.tables.get(dtype)
            col = t.column_of(row, minor) if t is not None else -1
            if t is None or col < 0:
                continue
            used_core, used_mem = int(t.used_core[row, col]), int(t.used_mem[row, col])
            if back is not None and back.allocation.node == alloc.node:
                for bu in back.allocation.usage():
                    if bu.type == dtype and bu.minor == minor:
                        used_core -= bu.core_milli
                        used_mem -= bu.memory
            total_core, total_mem = int(t.total_core[row, col]), int(t.total_mem[row, col])
            if used_core + core > total_core or (total_mem and used_mem + mem > total_mem):
                return (f"{dtype} {minor} of node {alloc.node} would hold {(used_core + core) / 10:g}% compute and "
                        f"{(used_mem + mem) / 2**30:.1f} GiB of {total_core / 10:g}% and {total_mem / 2**30:.1f} GiB "
                        f"({used_core / 10:g}% and {used_mem / 2**30:.1f} GiB already held)")
        return None

    def add_bound_checked(self, pod: PodRequest, alloc: PodAllocation) -> str | None:
        """Record a bound pod's allocation unless it would over-book a card (:meth:`overbooking`):
        then nothing changes (a record the pod had stays) and the reason is returned. An allocation
        devshare did not decide (written by hand, or by a deposed replica) is never counted beyond
        a card's capacity."""
        old = self.pods.get(pod.key)
        if old is not None and old.allocation == alloc:
            return self.add_bound(pod, alloc)
        reason = self.overbooking(alloc, ignore=pod.key if old is not None else None)
        if reason is not None:
            return reason
        self.add_bound(pod, alloc)
        return None

    # ------------------------------------------------------------------ what-if
    def scratch(self, nodes: Iterable[str]) -> ClusterState:
        """A separate state holding copies of ``nodes``, their devices and the allocations placed on
        them (all counted, as bound): what-if questions (which victims make room) are asked there,
        never by releasing and restoring live records."""
        out = ClusterState(max_containers_per_device=self.max_containers)
        keep = [n for n in nodes if n in self.nodes]
        for name in keep:
            out.upsert_node(self.nodes[name])
            if name in self.devices:
                out.set_devices(self.devices[name])
        wanted = set(keep)
        for rec in self.pods.values():
            if rec.allocation.node in wanted:
                if rec.peer is not None:
                    out.add_placed(rec.pod, rec.allocation, peer=rec.peer, problems=rec.problems)
                else:
                    out.add_bound(rec.pod, rec.allocation)
        for name in keep:
            for key, (cpu, memory) in self._plain_of.get(name, {}).items():
                out.set_plain(key, name, cpu, memory)
        return out

    # ------------------------------------------------------------------ node indexes
    # The engine answers per node *index* (evaluations, scores, verdicts); code outside the engine
    # maps names to indexes and back through these, never through the dicts behind them. An index
    # keeps its meaning while ``layout`` is unchanged (a removed node's index may be reused).
    @property
    def layout(self) -> int:
        """Changes whenever nodes or devices change (not on usage): index-keyed caches key on it."""
        return self.layout_version

    def indexes_of(self, names: list[str]) -> tuple[np.ndarray[Any, np.dtype[np.int64]], list[str], list[str]]:
        """The indexes of the known ``names`` (in order), those names, and the unknown ones."""
        row_of = self.row_of
        try:
            return np.fromiter(map(row_of.__getitem__, names), np.int64, len(names)), names, []
        except KeyError:
            known = [n for n in names if n in row_of]
            unknown = [n for n in names if n not in row_of]
            return np.fromiter(map(row_of.__getitem__, known), np.int64, len(known)), known, unknown

    def name_at(self, index: int) -> str | None:
        """The node at ``index`` (None: no node there now)."""
        return self.name_of.get(index)

    # ------------------------------------------------------------------ views
    def node_rows(self, names_: Iterable[str] | None = None) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Rows of the named nodes (unknown names are skipped), or of every node (sorted)."""
        if names_ is None:
            if self._all_rows is None or self._all_rows_key != len(self.row_of):
                self._all_rows = np.sort(np.fromiter(self.row_of.values(), np.int64, len(self.row_of)))
                self._all_rows_key = len(self.row_of)
            return self._all_rows
        return np.fromiter((self.row_of[n] for n in names_ if n in self.row_of), np.int64)

    def gpu_memory(self, node: str) -> dict[int, int]:
        """Total memory (bytes) of each GPU of ``node`` by minor (dialect annotations carry it)."""
        row = self.row_of.get(node)
        t = self.tables.get(names.GPU)
        if row is None or t is None:
            return {}
        n = t.count(row)
        return dict(zip(t.minor[row, :n].tolist(), t.total_mem[row, :n].tolist(), strict=True))

    def usage_key(self) -> tuple[Any, ...]:
        """A comparable summary of all usage (tests compare a live state with a rebuilt one)."""
        out: list[Any] = []
        for name in sorted(self.row_of):
            row = self.row_of[name]
            for t in sorted(self.tables):
                tb = self.tables[t]
                n = tb.count(row)
                out.append((name, t, tb.used_core[row, :n].tolist(), tb.used_mem[row, :n].tolist(),
                            tb.used_slots[row, :n].tolist()))
            out.append((name, int(self.cpu_used[row]), int(self.mem_used[row])))
        return tuple(out)

    def device_columns(self) -> list[DeviceColumns]:
        """Every device of every node, one :class:`DeviceColumns` per type (sorted by type), node rows in
        index order: a few array copies, for views over every device (metrics, occupancy) that would
        take seconds through :meth:`inspect` at thousands of nodes."""
        out = []
        name_of = self.name_of
        for t in sorted(self.tables):
            tb = self.tables[t]
            rows, cols = np.nonzero(tb.present)
            out.append(DeviceColumns(
                type=t, node=[name_of[r] for r in rows.tolist()],
                id=[tb.ids[r][c] for r, c in zip(rows.tolist(), cols.tolist(), strict=True)],
                minor=tb.minor[rows, cols],
                total_core=tb.total_core[rows, cols], used_core=tb.used_core[rows, cols],
                total_mem=tb.total_mem[rows, cols], used_mem=tb.used_mem[rows, cols],
                containers=tb.used_slots[rows, cols], healthy=tb.healthy[rows, cols],
                held_outside=tb.blocked[rows, cols], memory=t == names.GPU))
        return out

    def view(self) -> StateView:
        """A copy of what the views over every device read (:class:`StateView`)."""
        return StateView(nodes=sorted(self.row_of), columns=self.device_columns(),
                         pods=[(key, rec.allocation, rec.phase) for key, rec in self.pods.items()],
                         max_containers=self.max_containers,
                         peers=[(key, rec.allocation.node, rec.peer, rec.problems) for key, rec in self.pods.items()
                                if rec.peer is not None])

    def inspect(self) -> dict[str, Any]:
        """DESIGN.md's inspect JSON (:func:`inspect_view` of :meth:`view`)."""
        return inspect_view(self.view())
