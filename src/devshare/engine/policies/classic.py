"""The baseline policies of the FGD paper, as its published simulator scores them (integers 0..100):
Random, DotProd (Tetris), GpuClustering, GpuPacking and BestFit."""

from __future__ import annotations

import numpy as np

from devshare.engine.fit import MAX_SPEC_CPU, FitView, cpu_left, gpu_free, sum_per_row
from devshare.engine.policies.base import (
    MAX_SPEC_GPU,
    PAPER_MAX_SCORE,
    Choice,
    Floats,
    Ints,
    StatelessPolicy,
    best_fit_columns,
    empty_choice,
    lowest_columns,
)
from devshare.engine.policies.fgd import class_key, pod_gpu
from devshare.model import names
from devshare.model.request import PodRequest


def _choice(view: FitView, scores: Floats, free: Ints) -> Choice:
    if view.request is None or view.count == 0:
        return empty_choice(view, scores)
    return Choice(scores, best_fit_columns(view, free))


def min_max(raw: Ints) -> Floats:
    """kube-scheduler style NormalizeScore: integer min-max to 0..100 (all equal -> all 0)."""
    lo, hi = int(raw.min()), int(raw.max())
    if hi == lo:
        return np.zeros(raw.shape, np.float64)
    return ((raw - lo) * PAPER_MAX_SCORE // (hi - lo)).astype(np.float64)


class BestFitPolicy(StatelessPolicy):
    """100 x (1 - [0.5 (free CPU - ask) / 128000 + 0.5 (free GPU - ask) / 8000]), truncated, then
    min-max rescaled over the feasible nodes. Cards: best fit."""

    name = "bestfit"

    def choose(self, view: FitView) -> Choice:
        if len(view.rows) == 0:
            return empty_choice(view)
        state, rows, pod = view.state, view.rows, view.pod
        free = gpu_free(state, rows)
        count, milli = pod_gpu(pod)
        cpu_rest = (cpu_left(state, rows) - pod.cpu_milli) / MAX_SPEC_CPU
        gpu_rest = (sum_per_row(free) - count * milli) / MAX_SPEC_GPU
        raw = np.trunc((1.0 - (0.5 * cpu_rest + 0.5 * gpu_rest)) * PAPER_MAX_SCORE).astype(np.int64)
        return _choice(view, min_max(raw), free)


class DotProdPolicy(StatelessPolicy):
    """Tetris' alignment: node (free CPU, free GPU) . pod (CPU, GPU), each over the largest node's,
    score int(100 (1 - dot / 2)): the smallest dot product wins. Cards: best fit."""

    name = "dotprod"

    def choose(self, view: FitView) -> Choice:
        if len(view.rows) == 0:
            return empty_choice(view)
        state, rows, pod = view.state, view.rows, view.pod
        free = gpu_free(state, rows)
        count, milli = pod_gpu(pod)
        cpu = cpu_left(state, rows) / MAX_SPEC_CPU * (pod.cpu_milli / MAX_SPEC_CPU)
        gpu = sum_per_row(free) / MAX_SPEC_GPU * (count * milli / MAX_SPEC_GPU)
        raw = np.trunc(PAPER_MAX_SCORE * (1.0 - (cpu + gpu) / 2.0))
        return _choice(view, raw.astype(np.float64), free)


def affinity(pod: PodRequest) -> str:
    count, milli = pod_gpu(pod)
    if count == 0:
        return ""
    return "share" if count == 1 and milli < 1000 else f"{count}-gpu"


class GpuClusteringPolicy:
    """Bands by the GPU task types already on the node: same type only 75..100, mixed with it 50..75,
    empty 25..50, other types only 0..25, plus 25 x (8000 - free GPU) / 8000. CPU-only pods: 0."""

    name = "clustering"

    def __init__(self) -> None:
        self.types: dict[int, dict[str, int]] = {}

    def observe(self, pod: PodRequest) -> None:
        return None

    def placed(self, pod: PodRequest, row: int) -> None:
        a = affinity(pod)
        if a:
            d = self.types.setdefault(row, {})
            d[a] = d.get(a, 0) + 1

    def choose(self, view: FitView) -> Choice:
        if len(view.rows) == 0:
            return empty_choice(view)
        free = gpu_free(view.state, view.rows)
        a = affinity(view.pod)
        if not a:
            return _choice(view, np.zeros(len(view.rows), np.float64), free)
        fill = (PAPER_MAX_SCORE // 4) * (MAX_SPEC_GPU - sum_per_row(free)) // MAX_SPEC_GPU
        band = np.empty(len(view.rows), np.int64)
        for i, row in enumerate(view.rows.tolist()):
            on = self.types.get(row)
            if on and on.get(a, 0) > 0:
                band[i] = 75 if len(on) == 1 else 50
            else:
                band[i] = 25 if not on else 0
        return _choice(view, (fill + band).astype(np.float64), free)


class GpuPackingPolicy(StatelessPolicy):
    """Shared cards first (100 - free % on them / 10, floor 50), then free cards on a used node
    (50 - free cards taken, floor 33), then an idle node (33 - its cards, floor its cards)."""

    name = "packing"

    def choose(self, view: FitView) -> Choice:
        m = len(view.rows)
        if m == 0:
            return empty_choice(view)
        state, rows = view.state, view.rows
        free = gpu_free(state, rows)
        req = view.request
        if req is None or view.count == 0:
            return empty_choice(view, np.zeros(m, np.float64))
        t = state.tables[names.GPU]
        present = t.usable_mask[rows]
        n_cards = sum_per_row(present)
        full = (free >= 1000) & present
        n_full = sum_per_row(full)
        cols = best_fit_columns(view, free)
        taken = np.take_along_axis(free, cols, axis=1)
        full_used = sum_per_row(taken >= 1000)
        pct_on_used = sum_per_row(taken * 100 // 1000)
        case1 = np.maximum(PAPER_MAX_SCORE - pct_on_used // 10, PAPER_MAX_SCORE // 2)
        case2 = np.maximum(PAPER_MAX_SCORE // 2 - full_used, PAPER_MAX_SCORE // 3)
        case3 = np.maximum(PAPER_MAX_SCORE // 3 - n_full, n_full)
        score = np.where(n_full == n_cards, case3, np.where(full_used > 0, case2, case1))
        return Choice(score.astype(np.float64), cols)


class RandomPolicy(StatelessPolicy):
    """A uniformly random feasible node; a random fitting card for a share."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng([seed, 7])

    def choose(self, view: FitView) -> Choice:
        m = len(view.rows)
        scores = self.rng.random(m)
        req = view.request
        if req is None or view.count == 0:
            return empty_choice(view, scores)
        if req.whole or req.count > 1:
            return Choice(scores, lowest_columns(view, req.count))
        noise = np.where(view.fits, self.rng.random(view.fits.shape), -1.0)
        return Choice(scores, np.argmax(noise, axis=1)[:, None].astype(np.int64))


__all__ = ["BestFitPolicy", "DotProdPolicy", "GpuClusteringPolicy", "GpuPackingPolicy", "RandomPolicy",
           "class_key"]
