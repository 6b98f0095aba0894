"""The nodes and their devices, one row per node: the inventory the engine answers over (cluster-wide
arrays, :mod:`devshare.engine.table`), and the node indexes code outside the engine maps names through.
Set by whoever reads the inventory (the informer, a snapshot, the simulator). What pods use of them is
counted by :class:`devshare.engine.state.ClusterState`, built on this.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from devshare.engine.table import DeviceTable
from devshare.model import names
from devshare.model.device import NodeDevices
from devshare.model.node import NodeInfo

Rows = np.ndarray[Any, np.dtype[np.int64]]  # node indexes
Mask = np.ndarray[Any, np.dtype[np.bool_]]  # one flag per row asked

DEFAULT_MAX_CONTAINERS = 16  # seed 000: MGPUMaxContainersPerCard


class NodeTables:
    def __init__(self, *, max_containers_per_device: int = DEFAULT_MAX_CONTAINERS) -> None:
        self.max_containers = max_containers_per_device  # containers one card takes at most
        self.nodes: dict[str, NodeInfo] = {}
        self.devices: dict[str, NodeDevices] = {}
        self.row_of: dict[str, int] = {}
        self.name_of: dict[int, str] = {}
        self._free_rows: list[int] = []
        # rows in use or free for reuse (node indexes run below it); a plain attribute, as ``layout``:
        # the engine reads both on every filter
        self.n_rows = 0
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
        # bumped when nodes or devices change (not on usage changes): index-keyed caches key on it (a
        # node's index keeps its meaning while it holds)
        self.layout = 0
        self.names_version = 0  # bumped when a node comes or goes (row_of changes)
        self._all_rows: np.ndarray[Any, np.dtype[np.int64]] | None = None
        self._all_rows_key = -1

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
        row = self.n_rows
        self.n_rows += 1
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

    def upsert_node(self, info: NodeInfo) -> None:
        """Add or change a node. A node that says what it said before (most Node updates: heartbeats,
        conditions, taints, annotations devshare does not read) changes nothing, and keeps every answer
        kept for it and every per-layout table: each one of those updates used to cost the next filter a
        rebuild of the cluster's tables (at 5,000 nodes, 20-30 ms a node update)."""
        if self.nodes.get(info.name) == info and info.name in self.row_of:
            return
        self.version += 1
        self.layout += 1
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
        self.layout += 1
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
        self.layout += 1
        self.devices[nd.node] = nd
        row = self.row_of.get(nd.node)
        if row is not None:
            self._load_devices(row, nd)

    def remove_devices(self, node: str) -> None:
        self.version += 1
        self.layout += 1
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
        self.bandwidth.pop(name, None)
        if nd is not None and nd.gpu_bandwidth is not None:
            m = np.asarray(nd.gpu_bandwidth, dtype=np.float64)
            self.bandwidth[name] = np.minimum(m, m.T)  # a pair's bandwidth: the smaller direction
        self._recount(row, name)

    def _recount(self, row: int, name: str) -> None:
        """Count again the usage of the node ``name`` at ``row``, its devices (re)loaded: none here;
        :class:`devshare.engine.state.ClusterState` counts its records."""
        self.cpu_used[row] = self.mem_used[row] = 0

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

    # ------------------------------------------------------------------ node indexes
    # The engine answers per node *index* (evaluations, scores, verdicts); code outside the engine
    # maps names to indexes and back through these, never through the dicts behind them. An index
    # keeps its meaning while ``layout`` is unchanged (a removed node's index may be reused).
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
