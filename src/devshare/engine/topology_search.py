"""The ``search`` method of :mod:`devshare.engine.topology` (cases too large to enumerate): the bottleneck
found exactly by a binary search over the distinct pair bandwidths, asking at each threshold whether the
graph of pairs at or above it holds a k-clique (bitmask branch and bound, pruned by degree); then the
total maximized over the k-cliques of the graph at the bottleneck by a depth-first branch and bound in
index order (:class:`_Search`), stopped after ``SEARCH_NODE_LIMIT`` nodes (the result then says
``exact=False``: its bottleneck is still exact, its total the best found).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

F64 = npt.NDArray[np.float64]
IDX = npt.NDArray[np.intp]
SEARCH_NODE_LIMIT = 5_000


class TopologyResult(NamedTuple):
    gpus: tuple[int, ...]  # sorted GPU indices
    bottleneck: float  # GB/s, the smallest pair bandwidth in the set (0.0 for one GPU)
    total: float  # GB/s summed over the set's pairs (0.0 for one GPU)
    exact: bool  # False only when the search hit its node limit (the bottleneck is still exact)


def dyadic(values: F64) -> bool:
    """True when float sums of these values are exact (multiples of 1/1024, small enough)."""
    scaled = values * 1024.0
    return bool(np.all(scaled == np.floor(scaled)) and np.abs(scaled).sum() < 2.0**50)


def fsum_pairs(b: F64, gpus: Sequence[int]) -> float:
    return math.fsum(float(b[i, j]) for x, i in enumerate(gpus) for j in gpus[x + 1:])



def _find_clique(adj: list[int], cand: int, k: int) -> int | None:
    """A k-clique (as a bitmask) among the vertices of ``cand`` in the graph ``adj``, or None."""
    if k == 0:
        return 0
    # drop vertices that cannot be in a k-clique: fewer than k-1 neighbours among the candidates
    changed = True
    while changed:
        changed = False
        c = cand
        while c:
            low = c & -c
            if (adj[low.bit_length() - 1] & cand).bit_count() < k - 1:
                cand &= ~low
                changed = True
            c ^= low
    while cand.bit_count() >= k:
        low = cand & -cand
        cand ^= low
        found = _find_clique(adj, cand & adj[low.bit_length() - 1], k - 1)
        if found is not None:
            return found | low
    return None


def _threshold_adj(sub: F64, t: float) -> list[int]:
    """Adjacency bitmasks of the graph whose edges are the pairs with bandwidth >= t."""
    edges = sub >= t
    np.fill_diagonal(edges, False)
    return [sum(1 << int(j) for j in np.flatnonzero(row)) for row in edges]


def _best_bottleneck(sub: F64, k: int) -> tuple[float, int]:
    """The largest bottleneck of a k-set of ``sub``'s vertices, and one such set (bitmask)."""
    m = sub.shape[0]
    levels = np.unique(sub[np.triu_indices(m, 1)])[::-1]  # descending
    full = (1 << m) - 1
    lo, hi = 0, levels.size - 1  # the smallest level always works: the whole graph is a clique
    clique = full if m == k else None
    while lo < hi:
        mid = (lo + hi) // 2
        found = _find_clique(_threshold_adj(sub, float(levels[mid])), full, k)
        if found is not None:
            hi, clique = mid, found
        else:
            lo = mid + 1
    if clique is None:
        clique = _find_clique(_threshold_adj(sub, float(levels[lo])), full, k)
    assert clique is not None
    return float(levels[lo]), clique


class _Search:
    """Depth-first branch and bound, in index order, over k-cliques of the graph at the bottleneck."""

    def __init__(self, sub: F64, k: int, bottleneck: float, pref: F64 | None) -> None:
        self.sub = sub
        m = sub.shape[0]
        self.m, self.k = m, k
        self.adj = _threshold_adj(sub, bottleneck)
        masked = np.where(self.sub >= bottleneck, self.sub, 0.0)
        np.fill_diagonal(masked, 0.0)
        self.masked = masked
        self.pref = pref
        self.exact_sums = dyadic(masked) and (self.pref is None or dyadic(self.pref))
        self.margin = 0.0 if self.exact_sums else 1e-9
        self.best: tuple[int, ...] | None = None
        self.best_total = -math.inf
        self.best_pref = -math.inf
        self.nodes = 0
        self.complete = True

    def _bound(self, total: float, gain: F64, cand: list[int], r: int) -> float:
        # each pick v adds gain[v] (its pairs with the chosen) and half of its pairs with the other
        # r-1 picks, at most half its r-1 largest values towards the candidates
        c = len(cand)
        if r > 1:
            among = self.masked[np.ix_(cand, cand)]
            if r - 1 < c:
                among = np.partition(among, c - (r - 1), axis=1)[:, c - (r - 1):]
            ub = gain[cand] + among.sum(axis=1) / 2.0
        else:
            ub = gain[cand]
        top = ub if c <= r else np.partition(ub, c - r)[c - r:]
        return (total + float(top.sum())) * (1.0 + self.margin) + self.margin

    def _pref_bound(self, chosen: list[int], cand: list[int], r: int) -> float:
        if self.pref is None:
            return 0.0
        p = self.pref[cand]
        top = p if len(cand) <= r else np.partition(p, len(cand) - r)[len(cand) - r:]
        value = float(self.pref[chosen].sum() + top.sum())
        return value + self.margin * (1.0 + abs(value))

    def _leaf(self, chosen: list[int]) -> None:
        total = math.fsum(float(self.sub[i, j]) for x, i in enumerate(chosen) for j in chosen[x + 1:])
        pref = math.fsum(float(self.pref[i]) for i in chosen) if self.pref is not None else 0.0
        key, best = (total, pref), (self.best_total, self.best_pref)
        if key > best or (key == best and self.best is not None and tuple(chosen) < self.best):
            self.best, self.best_total, self.best_pref = tuple(chosen), total, pref

    def run(self) -> None:
        self._dfs([], 0.0, np.zeros(self.m), (1 << self.m) - 1)

    def _dfs(self, chosen: list[int], total: float, gain: F64, cand_mask: int) -> None:
        if not self.complete:
            return
        r = self.k - len(chosen)
        if r == 0:
            self._leaf(chosen)
            return
        self.nodes += 1
        if self.nodes > SEARCH_NODE_LIMIT:
            self.complete = False
            return
        cand = [v for v in range(self.m) if cand_mask >> v & 1]
        if len(cand) < r:
            return
        if self.best is not None:
            ub = self._bound(total, gain, cand, r)
            if ub < self.best_total:
                return
            if (ub <= self.best_total and tuple(chosen) > self.best[: len(chosen)]
                    and self._pref_bound(chosen, cand, r) <= self.best_pref):
                return  # can at best tie, and every set below comes after the best one
        if r == 1:  # the last pick: a leaf's total is total + gain[v], no need to descend
            for v in cand:
                if (total + float(gain[v])) * (1.0 + self.margin) + self.margin >= self.best_total:
                    chosen.append(v)
                    self._leaf(chosen)
                    chosen.pop()
            return
        for pos, v in enumerate(cand):
            if len(cand) - pos < r:
                break
            rest = cand_mask & self.adj[v] & ~((2 << v) - 1)
            if rest.bit_count() < r - 1:
                continue
            chosen.append(v)
            self._dfs(chosen, total + float(gain[v]), gain + self.masked[v], rest)
            chosen.pop()
            if not self.complete:
                return


def search_set(b: F64, avail: IDX, k: int, pref: F64 | None) -> TopologyResult:
    sub = b[np.ix_(avail, avail)]
    bottleneck, clique = _best_bottleneck(sub, k)
    s = _Search(sub, k, bottleneck, pref[avail] if pref is not None else None)
    s._leaf([v for v in range(avail.size) if clique >> v & 1])  # a first incumbent: prunes from the start
    s.run()
    assert s.best is not None
    gpus = tuple(int(avail[i]) for i in s.best)
    return TopologyResult(gpus, bottleneck, fsum_pairs(b, gpus), s.complete)


