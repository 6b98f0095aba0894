"""Cluster-wide device arrays: one row per node slot, one column per device of a type.

Every filter and score over many nodes is a numpy expression over these arrays; no per-device
Python loop sits on the hot path. A node keeps its row for as long as it exists; a freed row is
reused. Column ``j`` of a row is the node's ``j``-th device of the type in minor order.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from devshare.model.device import DeviceInfo

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
BOOL = npt.NDArray[np.bool_]


class DeviceTable:
    """Per device type: capacity and usage of every device of every node."""

    def __init__(self, device_type: str, rows: int = 64, width: int = 8) -> None:
        self.type = device_type
        self.width = width
        self.total_core = np.zeros((rows, width), np.int64)  # thousandths
        self.total_mem = np.zeros((rows, width), np.int64)  # bytes
        self.used_core = np.zeros((rows, width), np.int64)
        self.used_mem = np.zeros((rows, width), np.int64)
        self.used_slots = np.zeros((rows, width), np.int64)  # containers on the device
        self.free_core = np.zeros((rows, width), np.int64)  # total - used, kept in step (hot path)
        self.free_mem = np.zeros((rows, width), np.int64)
        self.usable_mask = np.zeros((rows, width), np.bool_)  # present & healthy & not blocked
        self.open_core = np.zeros((rows, width), np.int64)  # free_core where usable and > 0, else 0 (in step)
        self.inv_core = np.zeros((rows, width), np.float64)  # 1 / total (0 where no device): scores multiply
        self.inv_mem = np.zeros((rows, width), np.float64)
        self.present = np.zeros((rows, width), np.bool_)
        self.healthy = np.zeros((rows, width), np.bool_)
        self.blocked = np.zeros((rows, width), np.bool_)  # held outside devshare
        self.minor = np.full((rows, width), -1, np.int64)
        self.ids: list[list[str]] = [[] for _ in range(rows)]
        self.models: list[list[str]] = [[] for _ in range(rows)]

    @property
    def rows(self) -> int:
        return int(self.total_core.shape[0])

    def _grow(self, rows: int, width: int) -> None:
        if rows <= self.rows and width <= self.width:
            return
        rows = max(rows, self.rows)
        width = max(width, self.width)
        for name in ("total_core", "total_mem", "used_core", "used_mem", "used_slots", "present", "healthy",
                     "blocked", "minor", "free_core", "free_mem", "usable_mask", "open_core", "inv_core", "inv_mem"):
            old = getattr(self, name)
            fill = -1 if name == "minor" else 0
            new = np.full((rows, width), fill, old.dtype)
            new[: old.shape[0], : old.shape[1]] = old
            setattr(self, name, new)
        self.ids.extend([] for _ in range(rows - len(self.ids)))
        self.models.extend([] for _ in range(rows - len(self.models)))
        self.width = width

    def ensure_rows(self, rows: int) -> None:
        if rows > self.rows:
            self._grow(max(rows, 2 * self.rows), self.width)

    def set_devices(self, row: int, devices: tuple[DeviceInfo, ...], blocked_ids: tuple[str, ...] = ()) -> None:
        """Describe the devices of the node at ``row``; usage is reset (the caller re-applies it)."""
        self.ensure_rows(row + 1)
        if len(devices) > self.width:
            self._grow(self.rows, len(devices))
        self.clear(row)
        for j, d in enumerate(devices):
            self.total_core[row, j] = d.core_milli
            self.total_mem[row, j] = d.memory
            self.present[row, j] = True
            self.healthy[row, j] = d.health
            self.blocked[row, j] = bool(d.id) and d.id in blocked_ids
            self.minor[row, j] = d.minor
        self.free_core[row] = self.total_core[row]
        self.free_mem[row] = self.total_mem[row]
        self.usable_mask[row] = self.present[row] & self.healthy[row] & ~self.blocked[row]
        self.open_core[row] = np.where(self.usable_mask[row], self.free_core[row], 0)
        self.inv_core[row] = np.where(self.total_core[row] > 0, 1.0 / np.maximum(self.total_core[row], 1), 0.0)
        self.inv_mem[row] = np.where(self.total_mem[row] > 0, 1.0 / np.maximum(self.total_mem[row], 1), 0.0)
        self.ids[row] = [d.id for d in devices]
        self.models[row] = [d.model for d in devices]

    def clear(self, row: int) -> None:
        for arr in (self.total_core, self.total_mem, self.used_core, self.used_mem, self.used_slots,
                    self.free_core, self.free_mem, self.open_core):
            arr[row] = 0
        self.usable_mask[row] = False
        self.inv_core[row] = 0.0
        self.inv_mem[row] = 0.0
        self.present[row] = False
        self.healthy[row] = False
        self.blocked[row] = False
        self.minor[row] = -1
        self.ids[row] = []
        self.models[row] = []

    def column_of(self, row: int, minor: int) -> int:
        """The column of device ``minor`` at ``row``, or -1."""
        hits = np.flatnonzero(self.minor[row] == minor)
        return int(hits[0]) if hits.size else -1

    def count(self, row: int) -> int:
        return int(self.present[row].sum())

    def add_usage(self, row: int, col: int, core: int, memory: int, sign: int, slots: int = 1) -> None:
        """Count (sign +1) or uncount (-1) what one pod holds of a device (``slots`` containers). Free
        arrays may go negative when a device shrank under its pods, or when pods placed by another
        scheduler over-booked it; they are never clipped, so accounting stays exact."""
        self.used_core[row, col] += sign * core
        self.used_mem[row, col] += sign * memory
        self.used_slots[row, col] += sign * slots
        self.free_core[row, col] -= sign * core
        self.free_mem[row, col] -= sign * memory
        free = int(self.free_core[row, col])
        self.open_core[row, col] = free if free > 0 and self.usable_mask[row, col] else 0

    def usable(self) -> BOOL:
        """Devices that may take new work: present, healthy, not held outside devshare."""
        return self.usable_mask
