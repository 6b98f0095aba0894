"""Topology-aware GPU set selection (engine/topology.py). The command, ``devshare topology``:
tests/cli/test_topology.py."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine import topology
from devshare.engine.topology import TopologyResult, TopologySolver, best_set, mask_of, solver_for
from devshare.model.errors import InvalidInput
from devshare.model.links import load_topology_file
from support import REPO

TOPOLOGIES = REPO / "examples" / "topologies"
METHODS = ("auto", "enumerate", "search")


def load(name: str) -> tuple[list[list[float]], dict]:
    topo = load_topology_file(TOPOLOGIES / f"{name}.json")
    return topo.matrix, topo.expected


def pair_min(matrix: Sequence[Sequence[float]], gpus: Sequence[int]) -> float:
    return min(matrix[i][j] for i, j in itertools.combinations(gpus, 2))


def reference(
    matrix: Sequence[Sequence[float]], available: Sequence[int], k: int, pref: Sequence[float] | None = None
) -> TopologyResult | None:
    """Brute force: every k-subset, the order of the spec, exact sums."""
    avail = sorted(available)
    if len(avail) < k:
        return None
    best: tuple[tuple[float, float, float], tuple[int, ...]] | None = None
    for combo in itertools.combinations(avail, k):  # lexicographic: ties keep the first
        pairs = list(itertools.combinations(combo, 2))
        key = (
            min((matrix[i][j] for i, j in pairs), default=0.0),
            math.fsum(matrix[i][j] for i, j in pairs),
            math.fsum(pref[i] for i in combo) if pref is not None else 0.0,
        )
        if best is None or key > best[0]:
            best = (key, combo)
    assert best is not None
    return TopologyResult(best[1], best[0][0], best[0][1], True)


# ---- the fixtures' expectations ----


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("k", [2, 3, 4, 5, 6])
def test_seed_matrix_max_bottleneck_sets(k: int, method: str) -> None:
    matrix, expected = load("seed-8gpu-bandwidth")
    want = expected["max_bottleneck_set"][str(k)]
    result = best_set(np.array(matrix), range(8), k, method=method)  # type: ignore[arg-type]
    assert result is not None and result.exact
    assert result.bottleneck == want["best_bottleneck_gbps"]
    assert list(result.gpus) in want["optimal_sets"]
    assert result.bottleneck == pair_min(matrix, result.gpus)
    assert result == reference(matrix, range(8), k)


def test_seed_example() -> None:
    matrix, expected = load("seed-8gpu-bandwidth")
    example = expected["seed_example"]
    result = best_set(matrix, list(range(8)), 4)
    assert result is not None
    assert list(result.gpus) == example["better"]
    assert round(result.bottleneck, 2) == example["better_bottleneck"]
    assert pair_min(matrix, example["worse"]) == example["worse_bottleneck"]
    assert result.bottleneck > example["worse_bottleneck"]


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize(("name", "k"), [("dgx1-volta", 2), ("dgx1-volta", 4), ("4x-rtx8000", 2)])
def test_link_model_reproduces_go_gpuallocator(name: str, k: int, method: str) -> None:
    matrix, expected = load(name)
    n = len(matrix)
    result = best_set(matrix, list(range(n)), k, method=method)  # type: ignore[arg-type]
    assert result is not None
    assert list(result.gpus) in expected["go_gpuallocator_best_effort"][str(k)]


def test_dgx1_pascal_quads_are_the_nvlink_cliques() -> None:
    matrix, _ = load("dgx1-pascal")
    result = best_set(matrix, list(range(8)), 4)
    assert result is not None and result.gpus == (0, 1, 2, 3) and result.bottleneck == 25.0
    result = best_set(matrix, [1, 2, 3, 4, 5, 6, 7], 4)
    assert result is not None and result.gpus == (4, 5, 6, 7)


@pytest.mark.parametrize("method", METHODS)
def test_synthetic_16_gpus(method: str) -> None:
    matrix, expected = load("synthetic-16gpu-two-planes")
    for k in ("8", "9"):
        result = best_set(matrix, list(range(16)), int(k), method=method)  # type: ignore[arg-type]
        assert result is not None and result.exact
        assert result.bottleneck == expected[k]["best_bottleneck_gbps"]
    eight = best_set(matrix, list(range(16)), 8, method=method)  # type: ignore[arg-type]
    assert eight is not None and eight.gpus == tuple(range(8)) and eight.total == 28 * 300.0
    # with plane A half used, 8 GPUs still fit at 300 GB/s in plane B
    half = best_set(matrix, [0, 1, 2, 3, *range(8, 16)], 8, method=method)  # type: ignore[arg-type]
    assert half is not None and half.gpus == tuple(range(8, 16)) and half.bottleneck == 300.0


def test_uniform_nvswitch_takes_the_lowest_indices_or_the_preferred() -> None:
    matrix, _ = load("hgx-8gpu-nvswitch")
    result = best_set(matrix, list(range(8)), 4)
    assert result == TopologyResult((0, 1, 2, 3), 450.0, 6 * 450.0, True)
    pref = np.zeros(8)
    pref[[5, 6, 7, 2]] = [1.0, 1.0, 1.0, 0.5]
    assert best_set(matrix, list(range(8)), 4, pref) == TopologyResult((2, 5, 6, 7), 450.0, 2700.0, True)


def test_preference_never_beats_bandwidth() -> None:
    matrix, _ = load("dgx1-volta")
    pref = np.zeros(8)
    pref[[5, 7]] = 10.0  # 5-7 is a single NVLink: the 2-NVLink pairs still win
    result = best_set(matrix, list(range(8)), 2, pref)
    assert result is not None and result.bottleneck == 50.0
    assert result.gpus in {(1, 5), (5, 6), (4, 7), (6, 7)}
    assert result == reference(matrix, range(8), 2, list(pref))


# ---- small cases and input handling ----


def test_one_gpu_and_too_few() -> None:
    matrix, _ = load("dgx1-volta")
    assert best_set(matrix, [3, 6], 1) == TopologyResult((3,), 0.0, 0.0, True)
    assert best_set(matrix, [3, 6], 1, np.arange(8.0)) == TopologyResult((6,), 0.0, 0.0, True)
    assert best_set(matrix, [3, 6], 3) is None
    assert best_set(matrix, [], 1) is None
    mask = np.zeros(8, dtype=bool)
    mask[[1, 2]] = True
    assert best_set(matrix, mask, 2) == TopologyResult((1, 2), 50.0, 50.0, True)


def test_asymmetric_input_uses_the_slower_direction() -> None:
    b = np.array([[0.0, 10.0, 1.0], [3.0, 0.0, 9.0], [1.0, 8.0, 0.0]])
    result = best_set(b, [0, 1, 2], 2)
    assert result == TopologyResult((1, 2), 8.0, 8.0, True)


@pytest.mark.parametrize(
    ("matrix", "available", "k", "message"),
    [
        ([[0, 1], [1, 0]], [0, 1], 0, "at least 1"),
        ([[0, 1], [1, 0]], [0, 2], 1, "GPU index 2 is out of range"),
        ([[0, 1], [1, 0]], [-1], 1, "GPU index -1 is out of range"),
        ([[0, 1], [1, 0]], [1, 1], 1, "GPU index 1 is listed twice"),
        ([[0, 1], [1, 0]], [True, False, True], 1, "mask must have 2 entries"),
        ([[0, 1], [1, 0]], [0.5], 1, "list of indices or a boolean mask"),
        ([[0, 1, 2], [1, 0, 2]], [0], 1, "must be square"),
        ([[0, -1], [-1, 0]], [0], 1, "finite numbers >= 0"),
        ([[0, float("inf")], [1, 0]], [0], 1, "finite numbers >= 0"),
    ],
)
def test_bad_input(matrix: list[list[float]], available: list[int], k: int, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        best_set(matrix, available, k)


def test_bad_preference() -> None:
    with pytest.raises(InvalidInput, match="2 finite numbers"):
        best_set([[0, 1], [1, 0]], [0, 1], 2, np.array([1.0, 2.0, 3.0]))


def test_solver_memoizes_and_is_shared() -> None:
    matrix, _ = load("seed-8gpu-bandwidth")
    solver = TopologySolver(matrix)
    assert solver.n == 8
    mask = mask_of([0, 1, 2, 3, 5, 6])
    first = solver.best(mask, 3)
    assert first == best_set(matrix, [0, 1, 2, 3, 5, 6], 3)
    assert solver.best(mask, 3) is first and len(solver._memo) == 1
    assert solver.best(mask_of([0, 1]), 3) is None
    assert solver_for(matrix) is solver_for(np.array(matrix)) is not solver
    assert solver_for(matrix) is not solver_for(load("dgx1-volta")[0])
    with pytest.raises(InvalidInput, match="beyond the 8"):
        solver.best(1 << 8, 1)


# ---- properties: the solver equals brute force ----

NICE = [0.0, 5.0, 10.0, 16.0, 25.0, 48.33, 48.38, 50.0, 96.4, 300.0]
values = st.one_of(st.sampled_from(NICE), st.floats(0, 1000, allow_nan=False, allow_infinity=False))


@st.composite
def problems(draw: st.DrawFn, max_n: int = 9) -> tuple[np.ndarray, list[int], int, np.ndarray | None]:
    n = draw(st.integers(1, max_n))
    b = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            b[i, j] = b[j, i] = draw(values)
    avail = [i for i in range(n) if draw(st.booleans())] if draw(st.booleans()) else list(range(n))
    k = draw(st.integers(1, n + 1))
    pref = None
    if draw(st.booleans()):
        pref = np.array([draw(st.sampled_from([0.0, 0.5, 1.0, 2.0])) for _ in range(n)])
    return b, avail, k, pref


@settings(max_examples=150, deadline=None)
@given(problems())
def test_best_set_equals_brute_force(problem: tuple[np.ndarray, list[int], int, np.ndarray | None]) -> None:
    b, avail, k, pref = problem
    want = reference(b.tolist(), avail, k, None if pref is None else pref.tolist())
    for method in METHODS:
        got = best_set(b, avail, k, pref, method=method)  # type: ignore[arg-type]
        assert got == want, method


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_16_gpus_bottleneck_equals_brute_force(data: st.DataObject) -> None:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    levels = np.array(data.draw(st.lists(st.sampled_from(NICE), min_size=1, max_size=6)))
    b = rng.choice(levels, size=(16, 16)) if data.draw(st.booleans()) else rng.uniform(0, 500, (16, 16))
    b = np.minimum(b, b.T)
    avail = [i for i in range(16) if rng.random() < 0.8]
    k = data.draw(st.integers(2, 4))
    want = reference(b.tolist(), avail, k)
    for method in METHODS:
        got = best_set(b, avail, k, method=method)  # type: ignore[arg-type]
        if want is None:
            assert got is None
        else:
            assert got is not None and got.bottleneck == want.bottleneck
            assert got == want


@settings(max_examples=40, deadline=None)
@given(problems(max_n=8), st.lists(st.integers(0, 255), min_size=1, max_size=6))
def test_solver_equals_best_set(problem: tuple[np.ndarray, list[int], int, np.ndarray | None],
                                masks: list[int]) -> None:
    b, _, k, _ = problem
    n = b.shape[0]
    solver = TopologySolver(b)
    for mask in masks:
        mask &= (1 << n) - 1
        avail = [i for i in range(n) if mask >> i & 1]
        assert solver.best(mask, k) == best_set(b, avail, k)
        assert solver.best(mask, k) == best_set(b, avail, k)  # memoized answer unchanged


def test_subset_tables_are_lexicographic() -> None:
    for m in (1, 5, 16, 17):  # 16: from bitmasks; 17: from itertools
        for k in (1, 2, m // 2, m):
            assert topology._combinations(m, k).tolist() == [list(c) for c in itertools.combinations(range(m), k)]


def test_exact_sums_group_multisets_and_survive_fingerprint_collisions(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    rows = rng.choice([0.1, 0.2, 0.3, 48.33, 1e-300, 1e300], size=(300, 6))
    want = [math.fsum(r) for r in rows.tolist()]
    assert topology._exact_sums(rows).tolist() == want
    monkeypatch.setattr(topology, "_MIX", np.zeros(256, dtype=np.uint64))  # every fingerprint collides
    assert topology._exact_sums(rows).tolist() == want
    same = np.tile([0.1, 0.2, 0.3], (50, 1))
    assert topology._exact_sums(same).tolist() == [math.fsum([0.1, 0.2, 0.3])] * 50
