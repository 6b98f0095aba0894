"""The DFS (seed 000) returns the best-scoring combination, and the vectorized path agrees with it."""

from __future__ import annotations

from itertools import combinations, product

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from devshare.engine.fit import Gather, card_fits, card_scores, pick_columns
from devshare.engine.search import Need, search
from devshare.engine.state import ClusterState
from devshare.model.request import DeviceRequest
from support.cluster import GiB, add_node, bound

W = 0.5
TOTAL_MEM = 16


def brute_force(free_c, free_m, slots, needs):  # type: ignore[no-untyped-def]
    """Every assignment of device sets to containers; the best mean card score, or None."""
    n = len(free_c)
    options = [list(combinations(range(n), nd.n)) for nd in needs]
    best = None
    for choice in product(*options):
        fc, fm, fs = list(free_c), list(free_m), list(slots)
        ok = True
        for nd, cols in zip(needs, choice, strict=True):
            for j in cols:
                fc[j] -= nd.core
                fm[j] -= int(nd.memory[j])
                fs[j] -= 1
        if min(fc) < 0 or min(fm) < 0 or min(fs) < 0:
            ok = False
        if not ok:
            continue
        total = 0.0
        for cols in choice:
            for j in cols:
                total += W * (1000 - fc[j]) / 1000 + (1 - W) * (TOTAL_MEM - fm[j]) / TOTAL_MEM
        score = total / sum(nd.n for nd in needs)
        best = score if best is None else max(best, score)
    return best


cards = st.lists(
    st.tuples(st.sampled_from([0, 200, 500, 800]), st.sampled_from([0, 4, 8, 12]), st.integers(1, 3)),
    min_size=1, max_size=4,
)
needs_st = st.lists(
    st.tuples(st.integers(1, 2), st.sampled_from([100, 300, 500]), st.sampled_from([1, 2, 4])),
    min_size=1, max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(cards=cards, asks=needs_st)
# a transposition-table collision once skipped the best branch here (Python's tuple hashes summed)
@example(cards=[(200, 0, 2), (0, 0, 3), (0, 8, 1)], asks=[(2, 100, 1), (2, 300, 1)])
def test_dfs_finds_the_best_combination(cards: list[tuple[int, int, int]], asks: list[tuple[int, int, int]]) -> None:
    used_c = [c for c, _, _ in cards]
    used_m = [m for _, m, _ in cards]
    slots = [s for _, _, s in cards]
    n = len(cards)
    needs = [Need(i, k, core, np.full(n, mem, np.int64), False) for i, (k, core, mem) in enumerate(asks)]
    free_c = [1000 - u for u in used_c]
    free_m = [TOTAL_MEM - u for u in used_m]
    res = search(free_c, free_m, slots, [1000] * n, [TOTAL_MEM] * n, [True] * n, [u == 0 for u in used_c], needs,
                 core_weight=W, binpack=True, budget=10**6)
    expected = brute_force(free_c, free_m, slots, needs)
    if expected is None:
        assert res is None
    else:
        assert res is not None and res.exhaustive
        assert abs(res.score - expected) < 1e-9


@settings(max_examples=100, deadline=None)
@given(used=st.lists(st.tuples(st.sampled_from([0, 100, 400, 700, 1000]), st.integers(0, 16)), min_size=1, max_size=6),
       core=st.sampled_from([100, 300, 500]), mem=st.integers(0, 8), k=st.integers(1, 3))
def test_vectorized_single_container_agrees_with_dfs(used: list[tuple[int, int]], core: int, mem: int, k: int) -> None:
    state = ClusterState()
    add_node(state, "n", len(used), memory=16 * GiB)
    for j, (c, m) in enumerate(used):
        if c or m:
            bound(state, f"u{j}", "n", j, core=c, memory=m * GiB)
    t = state.tables["gpu"]
    rows = state.node_rows(["n"])
    req = DeviceRequest(type="gpu", count=k, core_milli=core, memory=mem * GiB)
    g = Gather(t, rows)
    fits = card_fits(g, req, state.max_containers)
    n = len(used)
    res = search(t.free_core[0, :n], t.free_mem[0, :n], state.max_containers - t.used_slots[0, :n],
                 t.total_core[0, :n], t.total_mem[0, :n], t.usable()[0, :n], t.used_slots[0, :n] == 0,
                 [Need(0, k, core, np.full(n, mem * GiB, np.int64), False)], core_weight=W, binpack=True)
    if fits.sum() < k:
        assert res is None
        return
    assert res is not None
    cs = card_scores(g, req, W, True)
    cols = pick_columns(fits, cs, k)
    vec = float(np.take_along_axis(cs, cols, axis=1).mean())
    assert abs(vec - res.score) < 1e-9
