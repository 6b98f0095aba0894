"""The ``search`` method of GPU set selection (engine/topology_search.py): the bottleneck found exactly by
k-clique tests, the total by branch and bound, the node limit, and the exact sums it relies on."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine import topology_search
from devshare.engine.topology import best_set
from devshare.engine.topology_search import dyadic, fsum_pairs, search_set


def pair_min(b: np.ndarray, gpus: tuple[int, ...]) -> float:
    return min(float(b[i, j]) for i, j in itertools.combinations(gpus, 2))


def brute(b: np.ndarray, avail: list[int], k: int, pref: np.ndarray | None) -> tuple[tuple[int, ...], float, float]:
    """Every k-subset in lexicographic order: the largest (bottleneck, total, preference), first on ties."""
    def key(c: tuple[int, ...]) -> tuple[float, float, float]:
        pairs = list(itertools.combinations(c, 2))
        return (min(float(b[i, j]) for i, j in pairs), math.fsum(float(b[i, j]) for i, j in pairs),
                math.fsum(float(pref[i]) for i in c) if pref is not None else 0.0)
    best = max(itertools.combinations(avail, k), key=key)  # max keeps the first of equal keys
    return best, key(best)[0], key(best)[1]


def test_search_node_limit_keeps_the_bottleneck_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    b = rng.uniform(1, 100, (12, 12))
    b = np.minimum(b, b.T)
    exact = best_set(b, range(12), 6, method="enumerate")  # type: ignore[arg-type]
    monkeypatch.setattr(topology_search, "SEARCH_NODE_LIMIT", 2)
    bounded = search_set(b, np.arange(12), 6, None)
    assert exact is not None
    assert bounded.bottleneck == exact.bottleneck == pair_min(b, bounded.gpus)
    assert bounded.total <= exact.total
    assert not bounded.exact


def test_search_on_more_gpus_than_enumeration_covers() -> None:
    # 24 GPUs, three planes of 8 at 300 GB/s, 40 between planes: C(24, 12) is far beyond enumeration
    b = np.full((24, 24), 40.0)
    for p in range(3):
        b[p * 8:(p + 1) * 8, p * 8:(p + 1) * 8] = 300.0
    b[2, 5] = b[5, 2] = 250.0
    result = search_set(b, np.arange(24), 8, None)
    assert result.exact and result.gpus == tuple(range(8, 16))
    result = search_set(b, np.arange(24), 12, None)
    assert result.exact and result.bottleneck == 40.0
    # a whole clean plane (28 pairs), four of another (6 pairs, avoiding 2-5), 8 x 4 pairs between
    assert result.gpus == (0, 1, 2, 3, *range(8, 16))
    assert result.total == 28 * 300.0 + 6 * 300.0 + 32 * 40.0


def test_search_answers_in_the_caller_s_indices_and_breaks_ties_by_preference() -> None:
    b = np.full((6, 6), 50.0)
    np.fill_diagonal(b, 0.0)
    avail = np.array([1, 3, 4, 5])
    assert search_set(b, avail, 2, None).gpus == (1, 3)  # all equal: the lowest indices
    pref = np.array([0.0, 0.0, 0.0, 0.0, 1.0, 2.0])
    got = search_set(b, avail, 2, pref)
    assert got.gpus == (4, 5) and got.bottleneck == 50.0 and got.total == 50.0 and got.exact


NICE = [0.0, 5.0, 10.0, 16.0, 25.0, 48.33, 48.38, 50.0, 96.4, 300.0]


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_search_equals_brute_force(data: st.DataObject) -> None:
    n = data.draw(st.integers(2, 9))
    values = st.one_of(st.sampled_from(NICE), st.floats(0, 1000, allow_nan=False, allow_infinity=False))
    b = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            b[i, j] = b[j, i] = data.draw(values)
    avail = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=2)))
    k = data.draw(st.integers(2, len(avail)))
    pref = None
    if data.draw(st.booleans()):
        pref = np.array([data.draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])) for _ in range(n)])
    got = search_set(b, np.array(avail, np.intp), k, pref)
    gpus, bottleneck, total = brute(b, avail, k, pref)
    assert got.exact
    assert (got.gpus, got.bottleneck, got.total) == (gpus, bottleneck, total)


def test_dyadic_says_when_float_sums_are_exact() -> None:
    assert dyadic(np.array([0.0, 300.0, 48.5, 25.25, 1 / 1024]))
    assert not dyadic(np.array([48.33]))  # not a multiple of 1/1024
    assert not dyadic(np.array([2.0**41, 2.0**41]))  # too large: sums could round
    assert dyadic(np.zeros((0, 0)))


def test_fsum_pairs_sums_each_pair_once_exactly() -> None:
    b = np.array([[0.0, 0.1, 0.2], [0.1, 0.0, 0.3], [0.2, 0.3, 0.0]])
    assert fsum_pairs(b, (0, 1, 2)) == math.fsum([0.1, 0.2, 0.3]) == 0.6
    assert fsum_pairs(b, (1,)) == 0.0
    assert fsum_pairs(b, (2, 0)) == 0.2
