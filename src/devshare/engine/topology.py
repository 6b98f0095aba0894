"""Topology-aware GPU set selection (seed 003): the k available GPUs with the largest bottleneck.

Given a symmetric bandwidth matrix ``B`` (GB/s; the diagonal is ignored), the GPUs still free and a
count ``k``, :func:`best_set` returns the set ``S`` of ``k`` free GPUs that maximizes, in order:

1. the bottleneck: ``min B[i][j]`` over the pairs of ``S`` (what a ring collective runs at);
2. the total: ``sum B[i][j]`` over the pairs of ``S`` (each pair once);
3. the preference: ``sum preference[i]`` over ``S``, a per-GPU score from the caller (higher is
   better to take: e.g. GPUs whose PCIe switch is already busy, to keep whole switches free);
4. then the lowest indices (the lexicographically smallest sorted tuple).

Totals and preferences are compared exactly, so the order is a true function of the set: when
every value lies on a 1/1024 grid (link-model matrices, integers) float sums are already exact;
otherwise near-equal sums are recomputed with ``math.fsum`` (correctly rounded, independent of
summation order), once per distinct multiset of values (every set of a uniform matrix ties).

For ``k == 1`` there are no pairs: the bottleneck and total are reported as 0.0 and the GPU with
the best preference (then the lowest index) is taken.

Two search methods, both exact:

- ``enumerate`` (used when C(m, k) <= ENUMERATE_LIMIT for m free GPUs, so every k of up to 17
  GPUs): every k-subset is scored at once with numpy over a cached table of subsets and flat pair
  indices. C(16, 8) = 12870 subsets is the worst case on 16 GPUs.
- ``search`` (larger cases): the bottleneck is found exactly by a binary search over the distinct
  pair bandwidths, asking at each threshold whether the graph of pairs at or above it holds a
  k-clique (bitmask branch and bound, pruned by degree). The total is then maximized over the
  k-cliques of the graph at the bottleneck by a depth-first branch and bound in index order, with
  the bound ``total(S) + top-r of (gain(v) + half the r-1 largest pairs of v among the candidates)``
  for r picks left. The search
  stops after SEARCH_NODE_LIMIT nodes; the result then says ``exact=False``: its bottleneck is
  still exact, its total the best found.

:class:`TopologySolver` memoizes results per (available mask, k) for one matrix, and
:func:`solver_for` shares solvers between nodes whose matrices are equal, which is what the
scheduler wants: thousands of nodes, a few distinct matrices, a few hundred free-GPU masks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from functools import lru_cache
from typing import Literal

import numpy as np
import numpy.typing as npt

from devshare.engine.caches import LRU
from devshare.engine.topology_search import F64, IDX, TopologyResult, dyadic, fsum_pairs, search_set
from devshare.model.errors import InvalidInput

ENUMERATE_LIMIT = 25_000
Method = Literal["auto", "enumerate", "search"]

_MISSING = object()


def _as_matrix(matrix: npt.ArrayLike) -> F64:
    b = np.array(matrix, dtype=np.float64)
    if b.ndim != 2 or b.shape[0] != b.shape[1]:
        raise InvalidInput(f"the bandwidth matrix must be square, got shape {b.shape}", field="matrix")
    if not np.isfinite(b).all() or (b < 0).any():
        raise InvalidInput("the bandwidth matrix must hold finite numbers >= 0 (GB/s)", field="matrix")
    b = np.minimum(b, b.T)  # a pair's bandwidth is its slower direction
    np.fill_diagonal(b, 0.0)
    b.setflags(write=False)
    return b


def _as_available(available: Sequence[int] | npt.NDArray[np.generic], n: int) -> IDX:
    arr = np.asarray(available)
    if arr.dtype == np.bool_:
        if arr.shape != (n,):
            raise InvalidInput(f"an availability mask must have {n} entries, got {arr.shape}",
                               field="available")
        return np.flatnonzero(arr).astype(np.intp)
    if arr.size == 0:
        return np.zeros(0, np.intp)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise InvalidInput("available GPUs must be a list of indices or a boolean mask", field="available")
    idx = arr.astype(np.intp)
    bad = idx[(idx < 0) | (idx >= n)]
    if bad.size:
        raise InvalidInput(f"GPU index {int(bad[0])} is out of range: there are {n} GPUs (0..{n - 1})",
                           field="available")
    uniq, counts = np.unique(idx, return_counts=True)
    if (counts > 1).any():
        raise InvalidInput(f"GPU index {int(uniq[counts > 1][0])} is listed twice", field="available")
    return uniq


def _as_preference(preference: npt.ArrayLike | None, n: int) -> F64 | None:
    if preference is None:
        return None
    p = np.asarray(preference, dtype=np.float64)
    if p.shape != (n,) or not np.isfinite(p).all():
        raise InvalidInput(f"the preference must be {n} finite numbers, one per GPU", field="preference")
    return p if p.any() else None


_MIX = np.random.default_rng(20230314).integers(1, 2**63, size=256, dtype=np.uint64) | np.uint64(1)


def _exact_sums(rows: F64) -> F64:
    """``math.fsum`` of every row, computed once per distinct multiset of values.

    Rows that hold the same values in another order (every set of a uniform matrix) have the
    same exact sum; they are grouped by a fingerprint of their sorted values, the grouping is
    verified (a fingerprint collision falls back to one fsum per row).
    """
    if rows.shape[0] <= 8 or rows.shape[1] > _MIX.size:
        return np.array([math.fsum(r) for r in rows.tolist()])
    ordered = np.sort(rows, axis=1)
    prints = ordered.view(np.uint64) @ _MIX[: rows.shape[1]]  # wraps modulo 2^64
    _, first, inverse = np.unique(prints, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    same = (ordered == ordered[first[0]]).all() if first.size == 1 else np.array_equal(
        ordered, ordered[first[inverse]])
    if not same:
        return np.array([math.fsum(r) for r in rows.tolist()])
    sums = np.array([math.fsum(r) for r in ordered[first].tolist()])
    out: F64 = sums[inverse]
    return out


def _exact_argmax(rows: F64, exact: bool) -> IDX:
    """Indices of the rows whose sum is the largest, exactly (fsum where float sums may round)."""
    approx = rows.sum(axis=1)
    best = approx.max()
    if exact:
        return np.flatnonzero(approx == best)
    width = rows.shape[1]
    largest = max(float(rows.max()), -float(rows.min()), 1.0)
    slack = 4.0 * width * width * np.finfo(np.float64).eps * largest  # >= the rounding of two sums
    near = np.flatnonzero(approx >= best - slack)
    if near.size == 1:
        return near
    sums = _exact_sums(rows[near])
    winners: IDX = near[sums == sums.max()]
    return winners


MASK_TABLE_MAX = 16  # up to this many free GPUs, subsets are generated from all 2^m bitmasks at once


@lru_cache(maxsize=MASK_TABLE_MAX + 1)
def _popcounts(m: int) -> npt.NDArray[np.uint8]:
    """Bit counts of 0 .. 2^m - 1."""
    pc = np.zeros(1, np.uint8)
    for _ in range(m):
        pc = np.concatenate((pc, pc + 1))
    pc.setflags(write=False)
    return pc


@lru_cache(maxsize=1024)
def _combinations(m: int, k: int) -> IDX:
    """All k-subsets of range(m), ascending inside each row, rows in lexicographic order."""
    if m <= MASK_TABLE_MAX:
        # GPU j is bit m-1-j: a larger mask is a lexicographically smaller set, so sort descending
        masks = np.flatnonzero(_popcounts(m) == k)[::-1].astype(">u2")
        bits = np.unpackbits(masks.view(np.uint8).reshape(-1, 2), axis=1)[:, 16 - m:]  # column j = GPU j
        out = np.nonzero(bits)[1].astype(np.intp).reshape(masks.size, k)
    else:
        out = np.fromiter(itertools.chain.from_iterable(itertools.combinations(range(m), k)),
                          dtype=np.intp, count=math.comb(m, k) * k).reshape(-1, k)
    out.setflags(write=False)
    return out


@lru_cache(maxsize=256)
def _subsets(m: int, k: int) -> tuple[IDX, IDX]:
    """All k-subsets of range(m) in lexicographic order, and their pairs as flat indices into m x m."""
    combos = _combinations(m, k)
    pi, pj = np.triu_indices(k, 1)
    flat = combos[:, pi] * m + combos[:, pj]
    flat.setflags(write=False)
    return combos, flat


def _single(avail: IDX, pref: F64 | None) -> TopologyResult:
    if pref is None:
        return TopologyResult((int(avail[0]),), 0.0, 0.0, True)
    p = pref[avail]
    return TopologyResult((int(avail[int(np.argmax(p))]),), 0.0, 0.0, True)


def _enumerate(b: F64, avail: IDX, k: int, pref: F64 | None) -> TopologyResult:
    m = avail.size
    combos, flat = _subsets(m, k)
    sub = np.ascontiguousarray(b[np.ix_(avail, avail)]).ravel()
    vals = sub[flat]  # (subsets, pairs)
    bottlenecks = vals.min(axis=1)
    bottleneck = bottlenecks.max()
    cand = np.flatnonzero(bottlenecks == bottleneck)
    if cand.size > 1:
        rows = vals if cand.size == vals.shape[0] else vals[cand]  # no copy when every subset ties
        cand = cand[_exact_argmax(rows, dyadic(sub))]
    if cand.size > 1 and pref is not None:
        p = pref[avail][combos[cand]]
        cand = cand[_exact_argmax(p, dyadic(p))]
    gpus = tuple(int(g) for g in avail[combos[cand[0]]])
    return TopologyResult(gpus, float(bottleneck), fsum_pairs(b, gpus), True)


# ---- search: exact bottleneck by k-clique tests, then branch and bound on the total ----


def _solve(b: F64, avail: IDX, k: int, pref: F64 | None, method: Method) -> TopologyResult | None:
    if k < 1:
        raise InvalidInput(f"the GPU count must be at least 1, got {k}", field="count")
    m = avail.size
    if m < k:
        return None
    if k == 1:
        return _single(avail, pref)
    if method == "enumerate" or (method == "auto" and math.comb(m, k) <= ENUMERATE_LIMIT):
        return _enumerate(b, avail, k, pref)
    return search_set(b, avail, k, pref)


def best_set(
    matrix: npt.ArrayLike,
    available: Sequence[int] | npt.NDArray[np.generic],
    k: int,
    preference: npt.ArrayLike | None = None,
    *,
    method: Method = "auto",
) -> TopologyResult | None:
    """The best set of ``k`` GPUs among ``available`` (indices or a bool mask); None if too few."""
    b = _as_matrix(matrix)
    n = b.shape[0]
    return _solve(b, _as_available(available, n), k, _as_preference(preference, n), method)


class TopologySolver:
    """:func:`best_set` for one matrix, memoized per (available bitmask, k), no preference."""

    MAX_ENTRIES = 65_536

    def __init__(self, matrix: npt.ArrayLike) -> None:
        self.matrix = _as_matrix(matrix)
        self.n = int(self.matrix.shape[0])
        self._memo: LRU[tuple[int, int], TopologyResult | None] = LRU(self.MAX_ENTRIES)

    def best(self, mask: int, k: int) -> TopologyResult | None:
        """Bit i of ``mask`` set = GPU i available."""
        key = (mask, k)
        hit = self._memo.get(key, _MISSING)
        if hit is not _MISSING:
            return hit  # type: ignore[no-any-return]
        if mask < 0 or mask >> self.n:
            raise InvalidInput(f"availability mask {mask:#x} names GPUs beyond the {self.n} of this node",
                               field="available")
        avail = np.array([i for i in range(self.n) if mask >> i & 1], dtype=np.intp)
        result = _solve(self.matrix, avail, k, None, "auto")
        self._memo.put(key, result)
        return result


_SOLVERS: dict[bytes, TopologySolver] = {}
_MAX_SOLVERS = 256


def solver_for(matrix: npt.ArrayLike) -> TopologySolver:
    """The shared solver of a matrix (equal matrices share one, and so its memo)."""
    b = _as_matrix(matrix)
    key = b.shape[0].to_bytes(4, "little") + b.tobytes()
    solver = _SOLVERS.get(key)
    if solver is None:
        if len(_SOLVERS) >= _MAX_SOLVERS:
            _SOLVERS.pop(next(iter(_SOLVERS)))
        solver = _SOLVERS[key] = TopologySolver(b)
    return solver


def mask_of(gpus: Sequence[int]) -> int:
    """The availability bitmask of a list of GPU indices."""
    mask = 0
    for g in gpus:
        mask |= 1 << int(g)
    return mask
