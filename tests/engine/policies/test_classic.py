"""The FGD paper's baseline policies (engine/policies/classic.py) against the reference README's
formulas: BestFit, DotProd, GpuPacking, GpuClustering and Random."""

from __future__ import annotations

import math

import numpy as np

from devshare.engine.policies.classic import (
    BestFitPolicy,
    DotProdPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
    RandomPolicy,
    affinity,
    min_max,
)
from devshare.engine.scheduler import Scheduler
from devshare.sim.replay import pod_request
from support.scoring import cluster, pod, scores


def test_bestfit_formula_and_rescale() -> None:
    state = cluster([(64000, 8, "G2"), (32000, 2, "G2"), (96000, 8, "G2")], {(0, 0): 1000, (0, 1): 1000})
    p = pod(4000, 1, 1000)
    raw = [math.trunc(100 * (1 - (0.5 * (cpu - 4000) / 128000 + 0.5 * (g - 1000) / 8000)))
           for cpu, g in ((64000, 6000), (32000, 2000), (96000, 8000))]
    lo, hi = min(raw), max(raw)
    assert scores(state, BestFitPolicy(), p) == [float((r - lo) * 100 // (hi - lo)) for r in raw]


def test_dotprod_prefers_the_smallest_dot_product() -> None:
    state = cluster([(64000, 8, "G2"), (32000, 2, "G2")])
    p = pod(8000, 1, 500)
    want = [math.trunc(100 * (1 - ((cpu / 128000) * (8000 / 128000) + (g / 8000) * (500 / 8000)) / 2))
            for cpu, g in ((64000, 8000), (32000, 2000))]
    assert scores(state, DotProdPolicy(), p) == want


def test_packing_bands() -> None:
    # n0: a shared card with 300 free; n1: used node with a free card; n2: idle 8-GPU node
    state = cluster([(64000, 2, "G2"), (64000, 2, "G2"), (64000, 8, "G2")], {(0, 0): 700, (1, 0): 1000})
    got = scores(state, GpuPackingPolicy(), pod(1000, 1, 250))
    assert got == [100 - (300 * 100 // 1000) // 10, 50 - 1, max(33 - 8, 8)]


def test_clustering_bands() -> None:
    state = cluster([(64000, 2, "G2"), (64000, 2, "G2"), (64000, 2, "G2")])
    pol = GpuClusteringPolicy()
    share = pod_request(pod(1000, 1, 500))
    whole = pod_request(pod(1000, 1, 1000))
    pol.placed(share, state.row_of["n0"])
    pol.placed(share, state.row_of["n1"])
    pol.placed(whole, state.row_of["n1"])
    fill = 25 * (8000 - 2000) // 8000  # free GPU as seen by the policy (usage not applied here)
    assert scores(state, pol, pod(1000, 1, 500)) == [75 + fill, 50 + fill, 25 + fill]
    assert scores(state, pol, pod(1000, 0, 0)) == [0, 0, 0]


def test_min_max_rescales_to_0_100_in_integers_and_all_equal_to_zero() -> None:
    assert min_max(np.array([10, 20, 40], np.int64)).tolist() == [0.0, 33.0, 100.0]
    assert min_max(np.array([7, 7, 7], np.int64)).tolist() == [0.0, 0.0, 0.0]
    assert min_max(np.array([-5, 5], np.int64)).tolist() == [0.0, 100.0]


def test_affinity_is_the_gpu_task_type() -> None:
    assert affinity(pod_request(pod(1000, 0, 0))) == ""
    assert affinity(pod_request(pod(1000, 1, 500))) == "share"
    assert affinity(pod_request(pod(1000, 1, 1000))) == "1-gpu"
    assert affinity(pod_request(pod(1000, 4, 1000))) == "4-gpu"


def test_bestfit_and_dotprod_take_the_fitting_card_with_the_least_free() -> None:
    state = cluster([(64000, 4, "G2")], {(0, 0): 900, (0, 1): 400, (0, 2): 600})  # free 100, 600, 400, 1000
    for policy in (BestFitPolicy(), DotProdPolicy(), GpuPackingPolicy()):
        placed = Scheduler(state, policy=policy).place(pod_request(pod(1000, 1, 300)))
        assert placed is not None
        assert placed.allocation.containers[0].devices[0].minor == 2, policy.name


def test_random_is_reproducible_by_seed_and_only_picks_fitting_cards() -> None:
    state = cluster([(64000, 4, "G2"), (64000, 4, "G2")], {(0, 0): 900, (0, 2): 900, (1, 1): 900})
    share = pod(1000, 1, 500)
    runs = [scores(state, RandomPolicy(seed), share) for seed in (3, 3, 4)]
    assert runs[0] == runs[1] and runs[0] != runs[2]
    assert all(0.0 <= x < 1.0 for x in runs[0])
    full = {("n0", 0), ("n0", 2), ("n1", 1)}
    sched = Scheduler(state, policy=RandomPolicy(11))
    for _ in range(20):
        placed = sched.place(pod_request(share))
        assert placed is not None
        assert (placed.node, placed.allocation.containers[0].devices[0].minor) not in full
    whole = sched.place(pod_request(pod(1000, 2, 1000)))
    assert whole is not None
    want = {"n0": [1, 3], "n1": [0, 2]}[whole.node]  # whole cards: the lowest free ones
    assert [g.minor for g in whole.allocation.containers[0].devices] == want


def test_clustering_scores_only_placed_pods() -> None:
    state = cluster([(64000, 2, "G2"), (64000, 2, "G2")])
    pol = GpuClusteringPolicy()
    pol.observe(pod_request(pod(1000, 1, 500)))  # arrival alone changes nothing
    assert pol.types == {}
    pol.placed(pod_request(pod(1000, 0, 0)), state.row_of["n0"])  # CPU-only: no GPU task type
    assert pol.types == {}
    fill = 25 * (8000 - 2000) // 8000
    assert scores(state, pol, pod(1000, 1, 500)) == [25 + fill, 25 + fill]
