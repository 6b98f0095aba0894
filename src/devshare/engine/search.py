"""Seed 000's depth-first search over containers with pruning: the exact placement for pods where
several containers ask for the same device type (``"2,1,3"``), on one node. Each level of the tree is
a container, each branch a set of devices for it; a branch whose admission fails is cut; identical
device states are tried once per level; a bound on the best reachable score cuts branches that cannot
win. :func:`search` returns the best-scoring combination, not the first feasible one. The vectorized
fit (:mod:`devshare.engine.fit`) decides most nodes without it and agrees with it.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import combinations
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

Mask = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]


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
