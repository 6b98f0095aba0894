"""FGD (engine/policies/fgd.py): its scores against the published simulator's formula, the vectorized
fragmentation against its definition, the class table and the card de-duplication."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from devshare.engine.policies.fgd import (
    FGDPolicy,
    FragModel,
    class_key,
    first_of_kind,
    first_of_kind_by_columns,
    pod_gpu,
    sigmoid,
    top_classes,
)
from devshare.engine.scheduler import Scheduler
from devshare.model.request import ContainerRequest, PodRequest
from devshare.sim.replay import pod_request
from support.cluster import gpu
from support.scoring import cluster, pod, scores


def test_fgd_share_takes_the_card_that_removes_fragmentation() -> None:
    # classes: half 500-milli shares, half whole GPUs; node with cards free [1000, 500]
    classes = {(0, 500, 1, ()): 1.0, (0, 1000, 1, ()): 1.0}
    state = cluster([(32000, 2, "T4")], {(0, 1): 500})
    # F before: 0.5 * 0 + 0.5 * 500 = 250. On card 0: free [500, 500] -> 0.5 * 1000 = 500 (delta -250);
    # on card 1: free [1000, 0] -> 0 (delta +250): score int(100 sigmoid(0.25)) = 56, card 1.
    pol = FGDPolicy(top_classes(classes))
    assert scores(state, pol, pod(1000, 1, 500)) == [math.floor(100 / (1 + math.exp(-0.25)))]
    place = Scheduler(state, policy=pol).place(pod_request(pod(1000, 1, 500)))
    assert place is not None and place.allocation.containers[0].devices[0].minor == 1


def test_fgd_counts_cpu_and_model_as_fragmentation() -> None:
    classes = {(8000, 1000, 1, ("V100",)): 1.0}
    # T4 node: the class may not use it -> all free is fragment before and after; delta = 1000
    state = cluster([(32000, 2, "T4"), (32000, 2, "V100"), (9000, 2, "V100")])
    pol = FGDPolicy(top_classes(classes))
    got = scores(state, pol, pod(1000, 1, 1000))
    sig = [math.floor(100 / (1 + math.exp(-d / 1000))) for d in (1000, 0, 2000 - 0)]
    # V100 with room: frag 0 before and after; the 9000-CPU node: after the pod 8000 CPU is left, fine
    # (delta 0); but a 1500-CPU pod leaves 7500 < 8000: all 1000 left is fragment -> delta = 0 - 1000
    assert got == [sig[0], sig[1], sig[1]]
    got2 = scores(state, pol, pod(1500, 1, 1000))
    assert got2[2] == math.floor(100 / (1 + math.exp(1.0)))


def _frag_naive(classes: dict, free: list[int], cpu: int, model: str) -> float:
    total = 0.0
    for (c, m, k, models), p in classes.items():
        left = sum(free)
        if m == 0 or (models and model not in models) or cpu < c or sum(f >= m for f in free) < k:
            total += p * left
        else:
            total += p * sum(f for f in free if f < m)
    return total


@settings(max_examples=60, deadline=None)
@given(
    classes=st.dictionaries(
        st.tuples(st.sampled_from([0, 2000, 8000]), st.sampled_from([0, 250, 500, 700, 1000]),
                  st.integers(1, 3), st.sampled_from([(), ("A",), ("A", "B")])),
        st.integers(1, 5), min_size=1, max_size=6),
    nodes=st.lists(st.tuples(st.lists(st.integers(0, 1000), min_size=1, max_size=4),
                             st.integers(0, 10000), st.sampled_from(["A", "B"])), min_size=1, max_size=5),
)
def test_vectorized_frag_matches_the_definition(classes: dict, nodes: list) -> None:
    classes = {(c, m, k if m else 0, md): p for (c, m, k, md), p in classes.items()}
    model = FragModel(classes)
    width = 4
    free = np.array([f + [0] * (width - len(f)) for f, _, _ in nodes], np.int64)
    cpu = np.array([c for _, c, _ in nodes], np.int64)
    names = ["A", "B"]
    access = model.access(names)[:, [names.index(m) for _, _, m in nodes]]
    big, cnt = model.levels(free)
    got = model.frag(free.sum(axis=1), big, cnt, access, cpu)
    want = [_frag_naive(classes, f, c, m) for f, c, m in nodes]
    assert np.allclose(got, want)


def _first_of_kind_cube(free: np.ndarray, fits: np.ndarray) -> np.ndarray:
    """The definition, as a [rows, W, W] cube: a fitting card is dropped when a lower fitting card
    of its node has the same free share."""
    w = fits.shape[1]
    f = free[:, :w]
    same = (f[:, :, None] == f[:, None, :]) & fits[:, None, :]
    earlier = np.tril(np.ones((w, w), np.bool_), k=-1)
    return np.asarray(fits & ~(same & earlier[None, :, :]).any(axis=2))


@given(st.integers(0, 30).flatmap(lambda n: st.integers(1, 9).flatmap(lambda w: st.tuples(
    hnp.arrays(np.int64, (n, w + 1), elements=st.sampled_from([0, 100, 250, 500, 1000])),
    hnp.arrays(np.bool_, (n, w))))))
def test_first_of_kind_matches_its_definition(arrays: tuple[np.ndarray, np.ndarray]) -> None:
    free, fits = arrays
    want = _first_of_kind_cube(free, fits).tolist()
    assert first_of_kind(free, fits).tolist() == want
    assert first_of_kind_by_columns(free, fits).tolist() == want


def test_pod_gpu_and_class_key_read_the_first_gpu_ask() -> None:
    rdma = PodRequest(namespace="d", name="r", containers=(
        ContainerRequest(name="a", devices=()),
        ContainerRequest(name="b", devices=(gpu(50, count=2),)),
    ), cpu_milli=3000, gpu_models=("V100", "A100"))
    assert pod_gpu(rdma) == (2, 500)
    assert class_key(rdma) == (3000, 500, 2, ("A100", "V100"))  # models sorted: one key per class
    cpu_only = PodRequest(namespace="d", name="c", containers=(ContainerRequest(name="a", devices=()),),
                          cpu_milli=1500)
    assert pod_gpu(cpu_only) == (0, 0)
    assert class_key(cpu_only) == (1500, 0, 0, ())
    assert class_key(pod_request(pod(1000, 1, 250, ("T4",)))) == (1000, 250, 1, ("T4",))


def test_top_classes_keeps_the_most_frequent_until_the_coverage_and_renormalises() -> None:
    counts = {(0, 500, 1, ()): 50.0, (0, 1000, 1, ()): 30.0, (0, 250, 1, ()): 15.0, (0, 100, 1, ()): 5.0}
    assert top_classes(counts, coverage=0.8) == {(0, 500, 1, ()): 50 / 80, (0, 1000, 1, ()): 30 / 80}
    kept = top_classes(counts)  # 0.95: the three largest (95 of 100)
    assert set(kept) == {(0, 500, 1, ()), (0, 1000, 1, ()), (0, 250, 1, ())}
    assert math.isclose(sum(kept.values()), 1.0)
    assert top_classes({}) == {}
    assert top_classes({(0, 500, 1, ()): 0.0}) == {}
    # equal counts: the key order decides, so the table does not depend on the dict's order
    tie = {(0, 700, 1, ()): 1.0, (0, 300, 1, ()): 1.0}
    assert list(top_classes(tie, coverage=0.5)) == [(0, 300, 1, ())]


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.tuples(st.integers(0, 4), st.sampled_from([0, 250, 500, 1000]), st.integers(0, 2),
                                 st.just(())), st.floats(0.01, 100.0), min_size=1, max_size=10),
       st.floats(0.05, 1.0))
def test_top_classes_cover_at_least_the_coverage_and_sum_to_one(counts: dict, coverage: float) -> None:
    kept = top_classes(counts, coverage)
    assert kept and math.isclose(sum(kept.values()), 1.0)
    assert sum(counts[k] for k in kept) >= coverage * sum(counts.values()) - 1e-6
    # every kept class is at least as frequent as every dropped one
    assert min(counts[k] for k in kept) >= max((v for k, v in counts.items() if k not in kept), default=0.0)


def test_sigmoid_saturates_without_overflow_warnings() -> None:
    got = sigmoid(np.array([-1e6, -1.0, 0.0, 1.0, 1e6]))
    assert got[0] == 0.0 and got[-1] == 1.0 and got[2] == 0.5
    assert math.isclose(got[1] + got[3], 1.0)


def test_fgd_whole_cards_are_taken_lowest_free_index_first() -> None:
    classes = {(0, 1000, 1, ()): 1.0}
    state = cluster([(32000, 4, "T4")], {(0, 0): 500})
    pol = FGDPolicy(top_classes(classes))
    # card 0 half used: the whole-card class cannot use it before or after (frag 500 either way); two
    # whole cards leave one free card of three: F before 500, after 500, delta 0 -> int(100 sigmoid(0))
    assert scores(state, pol, pod(1000, 2, 1000)) == [50.0]
    placed = Scheduler(state, policy=pol).place(pod_request(pod(1000, 2, 1000)))
    assert placed is not None
    assert [g.minor for g in placed.allocation.containers[0].devices] == [1, 2]


def test_fgd_scores_a_cpu_only_pod_by_the_fragmentation_its_cpu_causes() -> None:
    # one class asks 8000 CPU and a whole card: a 2000-CPU pod on the 9000-CPU node leaves 7000, so
    # the node's two free cards turn to fragment (delta -2000); the 64000-CPU node is unaffected
    classes = {(8000, 1000, 1, ()): 1.0}
    state = cluster([(9000, 2, "T4"), (64000, 2, "T4")])
    got = scores(state, FGDPolicy(top_classes(classes)), pod(2000, 0, 0))
    assert got == [math.floor(100 / (1 + math.exp(2.0))), 50.0]


def test_frag_model_without_gpu_classes_counts_all_free_as_fragment() -> None:
    model = FragModel({(1000, 0, 0, ()): 2.0})
    assert model.n_groups == 0
    free = np.array([[1000, 300]], np.int64)
    big, cnt = model.levels(free)
    got = model.frag(free.sum(axis=1), big, cnt, model.access(["A"]), np.array([5000], np.int64))
    assert got.tolist() == [2.0 * 1300]
    assert model.access([]).shape == (0, 0)
