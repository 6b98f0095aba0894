"""Cluster state: nodes, their devices, pods and their allocations.

Usage is kept in the cluster-wide arrays of :mod:`devshare.engine.table`. A pod's allocation is
either *assumed* (reserved by the scheduler, waiting for its bind, expiring if the bind never
completes) or *bound*. After a restart the state is rebuilt from bound pods' annotations alone
(``_add_bound``). The records are changed by :mod:`devshare.engine.lifecycle` alone (the one cache:
assume, confirm, forget, expire, and the pods the watch reports): the methods that change them are
private to it (``tests/engine/test_lifecycle.py`` checks that no other module calls them); this
module only counts. Nodes and devices are the inventory, set by whoever reads them.

Every change that could oversubscribe a device goes through ``_assume``, which checks the allocation
against the arrays first and refuses it whole (nothing half-applied).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from devshare.engine import judge
from devshare.engine.caches import EngineCaches
from devshare.engine.nodetables import DEFAULT_MAX_CONTAINERS, NodeTables
from devshare.engine.records import Conflict, Hold, PodRecord
from devshare.engine.stateview import DeviceColumns, StateView, device_columns, inspect_view, view_of
from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.request import PodRequest

DEFAULT_ASSUME_TTL = 60.0  # seconds an assumed allocation waits for its bind
FINISHED_KEPT = 4096  # pods remembered as gone or finished (a late bind confirmation is checked against them)


class ClusterState(NodeTables):
    """The nodes (:class:`NodeTables`) and what pods hold of them: records, plain pods, namespace sums."""

    def __init__(self, *, max_containers_per_device: int = DEFAULT_MAX_CONTAINERS) -> None:
        super().__init__(max_containers_per_device=max_containers_per_device)
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
        # (node, source) -> why that source's inventory of the node could not be read (kept by
        # engine/takeover.py's Inventories; /inspect lists them)
        self.unreadable: dict[tuple[str, str], str] = {}
        # every cache of the engine, one invalidation rule: ``caches.per_layout`` keeps what is derived from
        # the nodes and devices only (totals, health, labels, bandwidth) until a node or a device changes
        self.caches = EngineCaches(self)
        self.is_scratch = False  # a what-if copy (:meth:`scratch`): changed freely, never the live state

    def _recount(self, row: int, name: str) -> None:
        """Count the usage of node ``name`` again, its devices (re)loaded: its plain pods and records."""
        self.cpu_used[row], self.mem_used[row] = self._plain_sum(name)
        for rec in self.pods.values():
            if rec.allocation.node == name:
                self._apply(rec, +1)

    # ------------------------------------------------------------------ pods that hold no record
    def _set_plain(self, key: str, node: str, cpu_milli: int, memory_bytes: int) -> None:
        """Count the CPU and memory of the bound pod ``key`` on ``node`` (replacing what was counted for
        it): a pod that holds no record here (another scheduler's, one asking no device, one whose
        allocation is not counted). A pod with a record is counted through it, never here too."""
        old = self.plain.get(key)
        if old == (node, cpu_milli, memory_bytes):
            return
        if old is not None:
            self._remove_plain(key)
        self.plain[key] = (node, cpu_milli, memory_bytes)
        self._plain_of.setdefault(node, {})[key] = (cpu_milli, memory_bytes)
        self._plain_usage(node, cpu_milli, memory_bytes)

    def _remove_plain(self, key: str) -> None:
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

    def why_not(self, pod: PodRequest, alloc: PodAllocation, *, ignore: str | None = None) -> str | None:
        """Why ``alloc`` cannot be added now (None when it fits; :func:`devshare.engine.judge.why_not`)."""
        return judge.why_not(self, self.pods, pod, alloc, ignore=ignore)

    # ------------------------------------------------------------------ accounting
    # (private to :mod:`devshare.engine.lifecycle`, the one cache: every change of a record goes there)
    def _assume(self, pod: PodRequest, alloc: PodAllocation, *, expires_at: float | None, hold: Hold,
                group: str | None = None) -> None:
        """Assume ``alloc`` for ``pod`` (held for ``hold``) until it is bound or ``expires_at``. All or
        nothing. ``group``: the record is a group plan's placeholder (``pod`` stands for a member to come)."""
        key = pod.key
        if key in self.pods:
            raise Conflict(f"pod {key} already holds an allocation on {self.pods[key].allocation.node}")
        reason = self.why_not(pod, alloc)
        if reason is not None:
            raise Conflict(reason)
        rec = PodRecord(pod=pod, allocation=alloc, phase="assumed", expires_at=expires_at, hold=hold, group=group)
        self.pods[key] = rec
        self._apply(rec, +1)
        self._count(rec, +1)
        self.version += 1

    def _bind(self, key: str) -> None:
        rec = self.pods.get(key)
        if rec is None:
            raise KeyError(f"pod {key} has no reserved allocation")
        rec.phase = "bound"
        rec.expires_at = None
        self.version += 1

    def _release_finished(self, key: str, uid: str) -> PodRecord | None:
        """Release a pod the cluster says is gone or finished, and remember it (by key and uid), so that
        a bind confirmation arriving after the watch's events never records it again."""
        if uid:
            self.finished[(key, uid)] = None
            while len(self.finished) > FINISHED_KEPT:
                self.finished.popitem(last=False)
        return self._release(key)

    def is_finished(self, key: str, uid: str) -> bool:
        return bool(uid) and (key, uid) in self.finished

    def _release(self, key: str) -> PodRecord | None:
        """Give back everything the pod holds (deleted, completed, or unreserved)."""
        rec = self.pods.pop(key, None)
        if rec is not None:
            self._apply(rec, -1)
            self._count(rec, -1)
            self.version += 1
        return rec

    def _add_bound(self, pod: PodRequest, alloc: PodAllocation) -> str | None:
        """Record a bound pod's allocation (from its annotation). Returns a conflict message if the
        devices were already over-used, but records it anyway: the annotation is the truth."""
        old = self.pods.get(pod.key)
        if old is not None:
            if old.allocation == alloc:
                old.phase = "bound"
                old.expires_at = None
                return None
            self._release(pod.key)
        self._remove_plain(pod.key)  # counted through its record from now on
        reason = self.why_not(pod, alloc) if alloc.node in self.row_of else None
        rec = PodRecord(pod=pod, allocation=alloc, phase="bound")
        self.pods[pod.key] = rec
        self._apply(rec, +1)
        self._count(rec, +1)
        self.version += 1
        return reason

    def _add_placed(self, pod: PodRequest, alloc: PodAllocation, *, peer: str,
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
            self._release(pod.key)
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
        """Whether ``alloc`` would book a card beyond its capacity (:func:`devshare.engine.judge.overbooking`)."""
        return judge.overbooking(self, self.pods, alloc, ignore=ignore)

    def _add_bound_checked(self, pod: PodRequest, alloc: PodAllocation) -> str | None:
        """Record a bound pod's allocation unless it would over-book a card (:meth:`overbooking`):
        then nothing changes (a record the pod had stays) and the reason is returned. An allocation
        devshare did not decide (written by hand, or by a deposed replica) is never counted beyond
        a card's capacity."""
        old = self.pods.get(pod.key)
        if old is not None and old.allocation == alloc:
            return self._add_bound(pod, alloc)
        reason = self.overbooking(alloc, ignore=pod.key if old is not None else None)
        if reason is not None:
            return reason
        self._add_bound(pod, alloc)
        return None

    # ------------------------------------------------------------------ what-if
    def scratch(self, nodes: Iterable[str]) -> ClusterState:
        """A separate state holding copies of ``nodes``, their devices and the allocations placed on
        them (all counted, as bound): what-if questions (which victims make room) are asked there,
        never by releasing and restoring live records (:class:`devshare.engine.lifecycle.WhatIf`)."""
        out = ClusterState(max_containers_per_device=self.max_containers)
        out.is_scratch = True
        keep = [n for n in nodes if n in self.nodes]
        for name in keep:
            out.upsert_node(self.nodes[name])
            if name in self.devices:
                out.set_devices(self.devices[name])
        wanted = set(keep)
        for rec in self.pods.values():
            if rec.allocation.node in wanted:
                if rec.peer is not None:
                    out._add_placed(rec.pod, rec.allocation, peer=rec.peer, problems=rec.problems)
                else:
                    out._add_bound(rec.pod, rec.allocation)
        for name in keep:
            for key, (cpu, memory) in self._plain_of.get(name, {}).items():
                out._set_plain(key, name, cpu, memory)
        return out

    # ------------------------------------------------------------------ views
    def device_columns(self) -> list[DeviceColumns]:
        """Every device, in columns (:func:`devshare.engine.stateview.device_columns`)."""
        return device_columns(self)

    def view(self) -> StateView:
        """A copy of what the views over every device read (:class:`StateView`)."""
        return view_of(self, self.pods, self.unreadable)

    def inspect(self) -> dict[str, Any]:
        """DESIGN.md's inspect JSON (:func:`inspect_view` of :meth:`view`)."""
        return inspect_view(view_of(self, self.pods, self.unreadable))
