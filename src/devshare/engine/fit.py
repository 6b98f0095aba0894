"""Per-node fit, vectorized over many nodes at once: which devices can take one share of a container's
ask (:func:`card_fits`, a boolean ``[nodes, devices]`` mask; the node fits when at least ``k`` are
true), their seed-000 scores, and a greedy placement of several containers (:func:`greedy`; the exact
search where it cannot decide is :mod:`devshare.engine.search`).

Reductions along the device axis of ``[rows, devices]`` arrays (:func:`any_per_row`,
:func:`sum_per_row`): numpy reduces a short last axis slowly: ``any(axis=1)`` or ``sum(axis=1)`` of a 5,000 x 8 array
takes 70-90 us, about as long as the rest of a pod's fit. Combining the few columns one by one
takes a quarter of that (a contiguous 8-wide boolean row is one 64-bit word: a fiftieth). The
results are exactly numpy's (integers and booleans only: float sums would change in their last
bits with the order of addition).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import numpy.typing as npt

from devshare.engine.state import ClusterState
from devshare.engine.table import DeviceTable
from devshare.model import names
from devshare.model.request import WHOLE, DeviceRequest, PodRequest

Mask = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]
FEW = 256  # rows below which numpy's own reduction is cheaper than a Python loop over the columns


def memory_need(req: DeviceRequest, total_mem: Ints) -> Ints:
    """Bytes ``req`` needs on each device (ratio requests depend on each device's total); a 0-d array
    (broadcasts) when the ask is in bytes."""
    if req.memory_ratio_milli:
        return total_mem * req.memory_ratio_milli // WHOLE
    return np.asarray(req.memory, np.int64)


class Gather:
    """The device arrays of some rows, gathered once and shared by the fit, the policy and the score."""

    def __init__(self, table: DeviceTable, rows: Ints, allowed: Mask | None = None) -> None:
        self.table = table
        self.rows = rows
        self._cache: dict[str, Any] = {}
        self._parent: tuple[Gather, Ints] | None = None
        # rows 0..n-1 in order (every node, none removed): a slice is a free view, no gather
        n = len(rows)
        self._prefix = n if n and is_range(rows) else None
        if allowed is not None:
            # the cards this pod may take (its GPU selection): usable means usable and allowed
            self._cache["usable_mask"] = self._get("usable_mask") & (
                allowed[: self._prefix] if self._prefix is not None else allowed[rows])

    def _get(self, name: str) -> Any:
        v = self._cache.get(name)
        if v is None:
            parent = self._parent
            if parent is not None and name in parent[0]._cache:
                v = parent[0]._cache[name][parent[1]]
            else:
                arr = getattr(self.table, name)
                v = arr[: self._prefix] if self._prefix is not None else arr[self.rows]
            self._cache[name] = v
        return v

    @property
    def free_core(self) -> Ints:
        return self._get("free_core")  # type: ignore[no-any-return]

    @property
    def free_mem(self) -> Ints:
        return self._get("free_mem")  # type: ignore[no-any-return]

    @property
    def total_core(self) -> Ints:
        return self._get("total_core")  # type: ignore[no-any-return]

    @property
    def total_mem(self) -> Ints:
        return self._get("total_mem")  # type: ignore[no-any-return]

    @property
    def used_slots(self) -> Ints:
        return self._get("used_slots")  # type: ignore[no-any-return]

    @property
    def inv_core(self) -> npt.NDArray[np.float64]:
        return self._get("inv_core")  # type: ignore[no-any-return]

    @property
    def inv_mem(self) -> npt.NDArray[np.float64]:
        return self._get("inv_mem")  # type: ignore[no-any-return]

    @property
    def usable(self) -> Mask:
        return self._get("usable_mask")  # type: ignore[no-any-return]

    def subset(self, idx: Ints) -> Gather:
        """The same arrays for ``rows[idx]``, each taken on first use from what was gathered already."""
        sub = Gather(self.table, self.rows[idx])
        sub._parent = (self, idx)
        return sub


def is_range(rows: Ints) -> bool:
    """True when ``rows`` is exactly 0, 1, ..., n-1 (the ends first: most other lists fail there)."""
    global _RANGE
    n = len(rows)
    if n and (int(rows[0]) != 0 or int(rows[-1]) != n - 1):
        return False
    if n > len(_RANGE):
        _RANGE = np.arange(max(n, 2 * len(_RANGE)), dtype=np.int64)
    return bool(np.array_equal(rows, _RANGE[:n]))


_RANGE = np.arange(1024, dtype=np.int64)


def card_fits(g: Gather, req: DeviceRequest, max_containers: int) -> Mask:
    """``[len(rows), width]``: can each device of each row take one share of ``req``?

    The hot-path form of :func:`devshare.engine.admit.card_reasons` ``== FITS`` (rules it implies
    are left out: a card too small in all has too little free); tests/engine/test_admit.py holds the
    two equal."""
    slots = g.used_slots
    if req.whole:
        # a whole device is exclusive: nothing else may be on it (every grant takes a slot)
        whole: Mask = g.usable & (slots == 0) & (g.free_core >= req.core_milli)
        if req.memory_ratio_milli < WHOLE and req.memory:
            whole &= g.free_mem >= req.memory
        return whole
    ok = g.usable & (g.free_core >= req.core_milli) & (slots < max_containers)
    # memory is checked even when none is asked: a card over-used by its annotations takes nothing more
    ok &= g.free_mem >= (memory_need(req, g.total_mem) if req.memory_ratio_milli else req.memory)
    return ok


def fitting(table: DeviceTable, rows: Ints, allowed: Mask | None, req: DeviceRequest,
            max_containers: int) -> tuple[Gather, Mask, Mask]:
    """The fit of one container's ask over ``rows`` at once: their device arrays (:class:`Gather`,
    ``allowed``: the cards the pod may take), which cards take one share of ``req``
    (:func:`card_fits`), and which rows have enough of them (``req.count``)."""
    g = Gather(table, rows, allowed)
    fits = card_fits(g, req, max_containers)
    enough = sum_per_row(fits) >= req.count if req.count > 1 else any_per_row(fits)
    return g, fits, enough


def card_scores(g: Gather, req: DeviceRequest, core_weight: float, binpack: bool) -> npt.NDArray[np.float64]:
    """Seed 000's card score after placing one share of ``req`` on each device:
    ``w * core-score + (1 - w) * memory-score`` (utilisation after placement); binpack scores fuller
    devices higher, spread emptier ones."""
    # utilisation after = 1 - w * free_core_after / total_core - (1 - w) * free_mem_after / total_mem
    need = memory_need(req, g.total_mem) if req.memory_ratio_milli else req.memory
    idle = (g.free_core - req.core_milli) * (core_weight * g.inv_core)
    idle += (g.free_mem - need) * ((1.0 - core_weight) * g.inv_mem)
    return np.asarray(1.0 - idle if binpack else idle, dtype=np.float64)


def pick_columns(fits: Mask, scores: npt.NDArray[np.float64], k: int) -> Ints:
    """For each row, the ``k`` fitting columns with the best scores (ties: lowest column)."""
    masked = np.where(fits, scores, -np.inf)
    if k == 1:
        return np.asarray(np.argmax(masked, axis=1)[:, None], dtype=np.int64)
    order = np.argsort(-masked, axis=1, kind="stable")
    return np.asarray(order[:, :k], dtype=np.int64)


def left_fits(usable: Mask, free_core: Ints, free_mem: Ints, slots: Ints, req: DeviceRequest, need_mem: Any,
              max_containers: int) -> Mask:
    """Which cards take one share of ``req`` given what is left on them (``greedy``'s running
    arrays): the hot-path form of :func:`devshare.engine.admit.card_reasons` ``== FITS`` (rules it
    implies left out), held equal to it by tests/engine/test_admit.py."""
    fits: Mask = usable & (free_core >= req.core_milli) & (free_mem >= need_mem)
    fits &= (slots == 0) if req.whole else (slots < max_containers)
    return fits


def greedy(
    g: Gather, needs: Sequence[tuple[int, DeviceRequest]], max_containers: int, core_weight: float, binpack: bool
) -> tuple[Mask, npt.NDArray[np.float64]]:
    """Place the containers one after another (biggest first), each on its best-scoring devices,
    on every row at once. Returns which rows it placed everything on (a sufficient test of fit) and
    the seed-000 score of the result there. The exact DFS runs only where this cannot decide."""
    free_core = g.free_core.copy()
    free_mem = g.free_mem.copy()
    slots = g.used_slots.copy()
    usable = g.usable.copy()
    tc = np.maximum(g.total_core, 1)
    tm = np.maximum(g.total_mem, 1)
    m = len(g.rows)
    ok = np.ones(m, np.bool_)
    picked: list[tuple[Ints, DeviceRequest]] = []
    order = sorted(needs, key=lambda cr: (not cr[1].whole, -cr[1].count, -cr[1].core_milli, -cr[1].memory))
    ar = np.arange(m)[:, None]
    for _, req in order:
        need_mem = memory_need(req, g.total_mem)
        fits = left_fits(usable, free_core, free_mem, slots, req, need_mem, max_containers)
        util = core_weight * (1.0 - (free_core - req.core_milli) / tc)
        util += (1.0 - core_weight) * (1.0 - (free_mem - need_mem) / tm)
        score = util if binpack else -util
        cols = pick_columns(fits, np.asarray(score, np.float64), req.count)
        good = np.take_along_axis(fits, cols, axis=1).all(axis=1)
        ok &= good
        nm = np.broadcast_to(need_mem, free_mem.shape)
        free_core[ar, cols] -= req.core_milli
        free_mem[ar, cols] -= np.take_along_axis(nm, cols, axis=1)
        slots[ar, cols] += 1
        if req.whole:
            usable[ar, cols] = False  # nothing else of this pod may join a whole device
        picked.append((cols, req))
    total = 0.0
    grants = 0
    for cols, req in picked:
        u = core_weight * (1.0 - np.take_along_axis(free_core, cols, axis=1) / np.take_along_axis(tc, cols, axis=1))
        u += (1.0 - core_weight) * (1.0 - np.take_along_axis(free_mem, cols, axis=1)
                                   / np.take_along_axis(tm, cols, axis=1))
        total = total + (u if binpack else 1.0 - u).sum(axis=1)
        grants += req.count
    return ok, np.asarray(total / max(grants, 1), np.float64)


# ---------------------------------------------------------------------------- the fitted window


@dataclass(frozen=True)
class FitView:
    """What the fit found, and what a policy scores (:class:`~devshare.engine.policies.base.Policy`):
    candidate nodes that fit, and per device whether one share fits. What the policies read of the
    candidates (the free GPU per card, the CPU and memory left) is read once per view and shared."""

    state: ClusterState
    pod: PodRequest
    rows: Ints  # candidate node rows; every one can hold the pod
    table: DeviceTable | None  # the device type's table (None for a pod asking no device)
    request: DeviceRequest | None  # per-device ask (None for a pod asking no device)
    fits: Mask  # [len(rows), width]: one share fits on that device (all False width when no device)
    # the device arrays of `rows` (free_core, free_mem, total_core, total_mem, used_slots, usable),
    # gathered once and shared; built from `table` when not given
    gather: Gather | None = field(default=None)

    def arrays(self) -> Gather:
        if self.gather is not None:
            return self.gather
        if self.table is None:
            raise ValueError("this pod asks for no device: there are no device arrays")
        g = Gather(self.table, self.rows)
        object.__setattr__(self, "gather", g)
        return g

    @property
    def count(self) -> int:
        return self.request.count if self.request is not None else 0

    @cached_property
    def gpu_free(self) -> Ints:
        """:func:`gpu_free` of the candidates (whatever the ask's device type: GPU policies read it)."""
        return gpu_free(self.state, self.rows)

    @cached_property
    def cpu_left(self) -> Ints:
        """:func:`cpu_left` of the candidates."""
        return cpu_left(self.state, self.rows)

    @cached_property
    def mem_left(self) -> Ints:
        """:func:`mem_left` of the candidates."""
        return mem_left(self.state, self.rows)


def gpu_free(state: ClusterState, rows: Ints) -> Ints:
    """``[M, W]`` free milli-GPU per usable card (0 on absent, unhealthy or held cards)."""
    t = state.tables.get(names.GPU)
    if t is None:
        return np.zeros((rows.shape[0], 1), np.int64)
    n = len(rows)
    if n and is_range(rows):  # every node in order: a view, no gather
        view = t.open_core[:n]
        view.flags.writeable = False  # the table's own array: read, never written through
        return view
    return t.open_core[rows]


MAX_SPEC_CPU = 128_000  # CPU (milli) of the largest node (the FGD paper's normaliser)


def cpu_left(state: ClusterState, rows: Ints) -> Ints:
    """CPU left per row; nodes that do not track CPU count as having plenty."""
    total = state.cpu_total[rows]
    return np.where(total > 0, total - state.cpu_used[rows], MAX_SPEC_CPU * 1000)


def mem_left(state: ClusterState, rows: Ints) -> Ints:
    """Memory (bytes) left per row; nodes that do not track memory count as having plenty."""
    total = state.mem_total[rows]
    return np.where(total > 0, total - state.mem_used[rows], UNTRACKED_MEMORY)


UNTRACKED_MEMORY = 1 << 60  # bytes: more than any node has


# ---------------------------------------------------------------------------- reductions per row


def any_per_row(m: Mask) -> Mask:
    """``m.any(axis=1)``."""
    n, w = m.shape
    if w == 8 and m.flags.c_contiguous and m.dtype == np.bool_:
        return np.asarray(m.view(np.uint64)[:, 0] != 0)
    if w == 0 or n < FEW:
        return np.asarray(m.any(axis=1), np.bool_)
    out = m[:, 0].copy()
    for j in range(1, w):
        out |= m[:, j]
    return out


def sum_per_row(a: npt.NDArray[Any]) -> Ints:
    """``a.sum(axis=1)`` of an integer or boolean array, as int64."""
    n, w = a.shape
    if w == 8 and a.flags.c_contiguous and a.dtype == np.bool_:
        return np.bitwise_count(a.view(np.uint64)[:, 0]).astype(np.int64)  # one bit set per True byte
    if w == 0 or n < FEW:
        return np.asarray(a.sum(axis=1, dtype=np.int64), np.int64)
    out = a[:, 0].astype(np.int64)
    for j in range(1, w):
        out += a[:, j]
    return out
