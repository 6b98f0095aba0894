"""Copies of the cluster state for the views over every device: DESIGN.md's inspect JSON, /ui's
occupancy, the per-card metrics. A copy is taken on the event loop in milliseconds (:func:`view_of`)
and read anywhere (a thread) while the state goes on changing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import numpy as np

from devshare.engine.nodetables import NodeTables
from devshare.engine.records import Phase, PodRecord
from devshare.model import names
from devshare.model.allocation import PodAllocation


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
    # device inventories that could not be read: node, source, why
    unreadable: list[tuple[str, str, str]] = []


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
    if view.unreadable:  # a node's inventory (a peer's register, a Device) that is not used: why
        out["unreadableInventories"] = [{"node": node, "source": source, "problem": problem}
                                        for node, source, problem in view.unreadable]
    return out


def device_columns(state: NodeTables) -> list[DeviceColumns]:
    """Every device of every node, one :class:`DeviceColumns` per type (sorted by type), node rows in
    index order: a few array copies, for views over every device (metrics, occupancy) that would
    take seconds through :meth:`ClusterState.inspect` at thousands of nodes."""
    out = []
    name_of = state.name_of
    for t in sorted(state.tables):
        tb = state.tables[t]
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

def view_of(state: NodeTables, pods: Mapping[str, PodRecord],
            unreadable: Mapping[tuple[str, str], str] | None = None) -> StateView:
    """A copy of what the views over every device read (:class:`StateView`)."""
    return StateView(nodes=sorted(state.row_of), columns=device_columns(state),
                     pods=[(key, rec.allocation, rec.phase) for key, rec in pods.items()],
                     max_containers=state.max_containers,
                     peers=[(key, rec.allocation.node, rec.peer, rec.problems) for key, rec in pods.items()
                            if rec.peer is not None],
                     unreadable=[(node, source, why) for (node, source), why in sorted((unreadable or {}).items())])
