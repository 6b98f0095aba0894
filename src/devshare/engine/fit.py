"""Per-node fit: which devices, and how much of each, for every container of a pod.

Two paths, same answer:

- :func:`card_fits` — vectorized over many nodes at once, for the common shape where one container
  asks for ``k`` devices of a type: a boolean ``[nodes, devices]`` mask of the devices that can take
  one share; the node fits when at least ``k`` are true.
- :func:`search` — seed 000's depth-first search over containers with pruning, for pods where
  several containers ask for the same device type (``"2,1,3"``). Each level of the tree is a
  container, each branch a set of devices for it; a branch whose admission fails is cut; identical
  device states are tried once per level; a bound on the best reachable score cuts branches that
  cannot win. It returns the best-scoring combination, not the first feasible one.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import combinations
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from devshare.engine.table import DeviceTable
from devshare.model.request import WHOLE, DeviceRequest

Mask = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]


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


# ---------------------------------------------------------------------------- DFS (seed 000)


class Need(NamedTuple):
    """One container's ask of one device type on one node, resolved to bytes per device."""

    container: int
    n: int  # devices asked
    core: int
    memory: Ints  # bytes needed on each device (ratio requests differ per device)
    whole: bool


class SearchResult(NamedTuple):
    columns: dict[int, tuple[int, ...]]  # container index -> device columns
    score: float
    exhaustive: bool  # False when the node budget stopped the search early
    nodes: int


def search(
    free_core: Sequence[int] | Ints,
    free_mem: Sequence[int] | Ints,
    free_slots: Sequence[int] | Ints,
    total_core: Sequence[int] | Ints,
    total_mem: Sequence[int] | Ints,
    usable: Sequence[bool] | Mask,
    untouched: Sequence[bool] | Mask,
    needs: Sequence[Need],
    *,
    core_weight: float,
    binpack: bool,
    budget: int = 2000,
    first: bool = False,
) -> SearchResult | None:
    """Best combination of devices for all ``needs`` on one node, or None if none fits.

    The score of a combination is the mean, over every (container, device) grant, of the device's
    seed-000 card score once the whole combination is placed (binpack: fuller is better)."""
    if sum(nd.n for nd in needs) == 0:
        return SearchResult({}, 0.0, True, 0)
    dfs = _Dfs(free_core, free_mem, free_slots, total_core, total_mem, usable, untouched, needs,
               core_weight=core_weight, binpack=binpack, budget=budget, first=first)
    dfs.run(0)
    if dfs.best is None:
        return None
    return SearchResult(dfs.best, dfs.best_score, first or not dfs.cut, dfs.nodes)


class _Dfs:
    """The depth-first search of :func:`search` over one node's cards: containers in ``order``
    (largest first), the devices of each tried most promising first, pruned by an upper bound
    (:meth:`bound`) and by a transposition table of equivalent situations (:meth:`card_hash`)."""

    def __init__(self, free_core: Sequence[int] | Ints, free_mem: Sequence[int] | Ints,
                 free_slots: Sequence[int] | Ints, total_core: Sequence[int] | Ints,
                 total_mem: Sequence[int] | Ints, usable: Sequence[bool] | Mask, untouched: Sequence[bool] | Mask,
                 needs: Sequence[Need], *, core_weight: float, binpack: bool, budget: int, first: bool) -> None:
        self.fc = [int(x) for x in free_core]
        self.fm = [int(x) for x in free_mem]
        self.fs = [int(x) for x in free_slots]
        self.tc = tc = [max(int(x), 1) for x in total_core]
        self.tm = tm = [max(int(x), 1) for x in total_mem]
        self.ok = ok = [bool(x) for x in usable]
        self.fresh = fresh = [bool(x) for x in untouched]  # nothing on the device: a whole-device ask may take it
        self.n = n = len(self.fc)
        self.used_c = [tc[j] - self.fc[j] for j in range(n)]
        self.used_m = [tm[j] - self.fm[j] for j in range(n)]
        self.needs = needs
        self.order = sorted(range(len(needs)),
                            key=lambda i: (-needs[i].n, -needs[i].core, -int(needs[i].memory.max(initial=0))))
        self.levels = len(self.order)
        self.grants_total = sum(nd.n for nd in needs)
        self.core_weight, self.binpack, self.budget, self.first = core_weight, binpack, budget, first
        self.taken = [0] * n  # grants placed on each device along the current path
        self.whole_taken = [0] * n  # whole-device grants on each device along the current path
        self.best: dict[int, tuple[int, ...]] | None = None
        self.best_score = -1.0
        self.nodes = 0
        self.cut = False
        self.chosen: dict[int, tuple[int, ...]] = {}
        # Cards with equal static traits are interchangeable: the rest of the search, and the score
        # of every completion, depend only on the level and the multiset of (traits, current state)
        # of the cards. A transposition table of those keys explores each such situation once, which
        # also collapses identical containers placed in either order and identical cards.
        traits: dict[tuple[int, int, bool, bool], int] = {}
        self.static = [traits.setdefault((tc[j], tm[j], fresh[j], ok[j]), len(traits)) for j in range(n)]
        # The key is kept incrementally: the sum of the cards' hashes (a multiset hash), updated for
        # the cards a branch touches (a 64-bit collision could skip one branch; it never breaks a fit).
        self.visited: set[tuple[int, int]] = set()
        # Zobrist-style: each distinct card situation gets a random 64-bit code (Python's own tuple
        # hash is too regular: sums of hashes of tuples differing by the same offsets collide)
        self.codes: dict[tuple[int, int, int, int, int, int], int] = {}
        self.rand = random.Random(0x5EED)
        self.hashes = [self.card_hash(j) for j in range(n)]
        self.state_hash = sum(self.hashes) & _MASK64
        self.remaining_core = sum(nd.n * nd.core for nd in needs)
        self.remaining_mem = sum(nd.n * int(nd.memory.max(initial=0)) for nd in needs)
        self.placed = 0

    def card_hash(self, j: int) -> int:
        t = (self.static[j], self.fc[j], self.fm[j], self.fs[j], self.taken[j], self.whole_taken[j])
        h = self.codes.get(t)
        if h is None:
            h = self.codes[t] = self.rand.getrandbits(64)
        return h

    def final_score(self) -> float:
        cw, used_c, used_m, tc, tm = self.core_weight, self.used_c, self.used_m, self.tc, self.tm
        total = 0.0
        for cols in self.chosen.values():
            for j in cols:
                util = cw * (used_c[j] / tc[j]) + (1.0 - cw) * (used_m[j] / tm[j])
                total += util if self.binpack else 1.0 - util
        return total / self.grants_total

    def bound(self) -> float:
        """An upper bound on the score of any completion of the current path."""
        cw, used_c, used_m, tc, tm, taken, ok = (self.core_weight, self.used_c, self.used_m, self.tc, self.tm,
                                                 self.taken, self.ok)
        rc, rm, binpack = self.remaining_core, self.remaining_mem, self.binpack
        best_card = 0.0
        total = 0.0
        for j in range(self.n):
            if binpack:
                u = cw * min(1.0, (used_c[j] + rc) / tc[j])
                u += (1.0 - cw) * min(1.0, (used_m[j] + rm) / tm[j])
            else:
                u = 1.0 - (cw * used_c[j] / tc[j] + (1.0 - cw) * used_m[j] / tm[j])
            total += taken[j] * u
            if ok[j] and u > best_card:
                best_card = u
        return (total + (self.grants_total - self.placed) * best_card) / self.grants_total

    def candidates(self, nd: Need, mem: list[int]) -> list[int]:
        """The devices that can take one of ``nd``'s grants now, most promising first."""
        fc, fm, fs, ok, fresh, taken, whole_taken = (self.fc, self.fm, self.fs, self.ok, self.fresh, self.taken,
                                                     self.whole_taken)
        cands = [
            j for j in range(self.n)
            if ok[j] and whole_taken[j] == 0 and fc[j] >= nd.core and fm[j] >= mem[j] and fs[j] >= 1
            and (not nd.whole or (fresh[j] and taken[j] == 0))
        ]
        cw, used_c, used_m, tc, tm = self.core_weight, self.used_c, self.used_m, self.tc, self.tm

        def card_util(j: int) -> float:
            return cw * (used_c[j] + nd.core) / tc[j] + (1.0 - cw) * (used_m[j] + mem[j]) / tm[j]

        # try the most promising devices first, so a good combination is found early
        cands.sort(key=lambda j: (-card_util(j) if self.binpack else card_util(j), j))
        return cands

    def run(self, level: int) -> None:
        if self.nodes >= self.budget:
            self.cut = True
            return
        key = (level, self.state_hash)
        visited = self.visited
        if key in visited:
            return  # an equivalent situation was explored already
        visited.add(key)
        self.nodes += 1
        last = level == self.levels
        if not last and self.best is not None and self.bound() <= self.best_score + 1e-12:
            return  # no completion can beat the best found
        if last:
            s = self.final_score()
            if s > self.best_score + 1e-12:
                self.best = dict(self.chosen)
                self.best_score = s
            if self.first:
                self.cut = True  # a feasible combination is all that was asked
            return
        nd = self.needs[self.order[level]]
        mem = [int(x) for x in nd.memory]
        cands = self.candidates(nd, mem)
        if len(cands) < nd.n:
            return
        nd_mem = int(nd.memory.max(initial=0))
        fc, fm, fs, used_c, used_m, taken, whole_taken, hashes = (self.fc, self.fm, self.fs, self.used_c,
                                                                  self.used_m, self.taken, self.whole_taken,
                                                                  self.hashes)
        static, codes, chosen, container = self.static, self.codes, self.chosen, nd.container
        core, whole, n_core, n_mem = nd.core, int(nd.whole), nd.n * nd.core, nd.n * nd_mem
        for combo in combinations(cands, nd.n):
            h_sum = self.state_hash
            for j in combo:  # place one grant on each device of the combination
                fc[j] -= core
                fm[j] -= mem[j]
                fs[j] -= 1
                used_c[j] += core
                used_m[j] += mem[j]
                taken[j] += 1
                whole_taken[j] += whole
                t = (static[j], fc[j], fm[j], fs[j], taken[j], whole_taken[j])  # card_hash, inlined
                h = codes.get(t)
                if h is None:
                    h = codes[t] = self.rand.getrandbits(64)
                h_sum = (h_sum + h - hashes[j]) & _MASK64
                hashes[j] = h
            self.state_hash = h_sum
            self.remaining_core -= n_core
            self.remaining_mem -= n_mem
            self.placed += nd.n
            chosen[container] = combo
            self.run(level + 1)
            del chosen[container]
            self.remaining_core += n_core
            self.remaining_mem += n_mem
            self.placed -= nd.n
            h_sum = self.state_hash
            for j in combo:  # and take it back
                fc[j] += core
                fm[j] += mem[j]
                fs[j] += 1
                used_c[j] -= core
                used_m[j] -= mem[j]
                taken[j] -= 1
                whole_taken[j] -= whole
                t = (static[j], fc[j], fm[j], fs[j], taken[j], whole_taken[j])
                h = codes.get(t)
                if h is None:
                    h = codes[t] = self.rand.getrandbits(64)
                h_sum = (h_sum + h - hashes[j]) & _MASK64
                hashes[j] = h
            self.state_hash = h_sum
            if self.cut:
                return
            if self.binpack and self.best_score >= 1.0 - 1e-12:
                return  # nothing can beat a perfect pack


_MASK64 = (1 << 64) - 1
