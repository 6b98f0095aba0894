"""FGD, fragmentation gradient descent (Weng et al., USENIX ATC 2023), as the published simulator
scores it: ``int(100 x sigmoid((F before - F after) / 1000))``; a share tries every fitting card and
keeps the best (lowest index on ties); whole cards are taken lowest index first."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

import numpy as np

from devshare.engine.policies.base import (
    PAPER_MAX_SCORE,
    Floats,
    Ints,
    Mask,
    NodeModels,
    cpu_left,
    empty_choice,
    gpu_free,
    lowest_columns,
)
from devshare.engine.policies.frag import ClassKey, FragModel
from devshare.engine.policies.protocol import Choice, FitView, StatelessPolicy
from devshare.engine.rowwise import any_per_row, sum_per_row


def sigmoid(x: Floats) -> Floats:
    with np.errstate(over="ignore"):
        return np.asarray(1.0 / (1.0 + np.exp(-x)), np.float64)


class NodeFrag:
    """Per-node aggregates and F for a :class:`FragModel`, cached per row and recomputed only for
    rows whose free cards or CPU changed since they were last seen."""

    def __init__(self, model: FragModel) -> None:
        self.model = model
        self.models = NodeModels()
        self._shape = (0, 0)
        t = len(model.thresholds)
        self.free = np.zeros((0, 0), np.int64)
        self.cpu = np.zeros(0, np.int64)
        self.big = np.zeros((t, 0), np.int64)
        self.cnt = np.zeros((t, 0), np.int64)
        self.frag = np.zeros(0, np.float64)
        self.valid = np.zeros(0, np.bool_)

    def _fit(self, n: int, w: int) -> None:
        if (n, w) != self._shape:
            t = len(self.model.thresholds)
            self.free = np.zeros((n, w), np.int64)
            self.cpu = np.zeros(n, np.int64)
            self.big = np.zeros((t, n), np.int64)
            self.cnt = np.zeros((t, n), np.int64)
            self.frag = np.zeros(n, np.float64)
            self.valid = np.zeros(n, np.bool_)
            self._shape = (n, w)

    def view(self, view: FitView) -> tuple[Ints, Ints, Ints, Ints, Ints, Mask, Floats]:
        """free ``[M, W]``, cpu left, total free, big ``[T, M]``, cnt ``[T, M]``, access ``[G, M]``,
        F ``[M]`` of the view's candidate rows."""
        state, rows, model = view.state, view.rows, self.model
        free = gpu_free(state, rows)
        cpu = cpu_left(state, rows)
        codes = self.models.codes(state, rows)
        access = model.access(self.models.names)[:, codes]
        self._fit(max(state.n_rows, int(rows.max()) + 1), free.shape[1])
        stale = ~self.valid[rows] | (self.cpu[rows] != cpu) | any_per_row(self.free[rows] != free)
        if stale.any():
            k = np.flatnonzero(stale)
            r = rows[k]
            big, cnt = model.levels(free[k])
            self.free[r] = free[k]
            self.cpu[r] = cpu[k]
            self.big[:, r] = big
            self.cnt[:, r] = cnt
            self.frag[r] = model.frag(sum_per_row(free[k]), big, cnt, access[:, k], cpu[k])
            self.valid[r] = True
        return (free, cpu, sum_per_row(free), self.big[:, rows], self.cnt[:, rows], access,
                self.frag[rows])


def first_of_kind(free: Ints, fits: Mask) -> Mask:
    """``fits`` without the cards that repeat a lower fitting card's free share on the same node
    (they would score the same and lose the tie on index)."""
    w = fits.shape[1]
    if fits.shape[0] * w * w <= CUBE_LIMIT:  # a few rows: one [rows, W, W] comparison
        f = free[:, :w]
        same = (f[:, :, None] == f[:, None, :]) & fits[:, None, :]
        return np.asarray(fits & ~(same & _earlier(w)).any(axis=2), np.bool_)
    return first_of_kind_by_columns(free, fits)


def first_of_kind_by_columns(free: Ints, fits: Mask) -> Mask:
    """:func:`first_of_kind` column pair by column pair: for thousands of rows, not a cube."""
    w = fits.shape[1]
    f = np.ascontiguousarray(free[:, :w].T)
    ok = np.ascontiguousarray(fits.T)
    out = ok.copy()
    for j in range(1, w):
        repeat = (f[0] == f[j]) & ok[0]
        for k in range(1, j):
            repeat |= (f[k] == f[j]) & ok[k]
        out[j] &= ~repeat
    return np.ascontiguousarray(out.T)


CUBE_LIMIT = 16_384  # rows x W x W below which the cube is cheaper than the column loop


@cache
def _earlier(w: int) -> Mask:
    """``[1, j, k]``: k < j."""
    return np.tril(np.ones((w, w), np.bool_), k=-1)[None, :, :]


def frag_deltas(frags: NodeFrag, view: FitView) -> tuple[Floats, Ints | None]:
    """F before minus F after placing the pod, per candidate row ``[M]`` or, for a share of one
    card, per row and card ``[M, W]`` (-inf where the card does not fit). Also the columns taken
    for whole/multi-card asks."""
    model = frags.model
    free, cpu, total, big, cnt, access, before = frags.view(view)
    cpu_after = cpu - view.pod.cpu_milli
    req = view.request
    if req is None or view.count == 0:
        return before - model.frag(total, big, cnt, access, cpu_after), None
    if req.count == 1 and not req.whole:
        i, j = np.nonzero(first_of_kind(free, view.fits))
        after = model.frag_after_share(free, i, j, total, big, cnt, access, cpu_after, req.core_milli)
        delta = np.full(view.fits.shape, -np.inf)
        delta[i, j] = before[i] - after
        return delta, None
    cols = lowest_columns(view, req.count)
    taken = np.take_along_axis(free, cols, axis=1)
    if req.whole:  # fully free cards: above every threshold before, nothing after
        gone = sum_per_row(taken)
        after = model.frag(total - gone, big - gone, cnt - req.count, access, cpu_after)
    else:
        free_after = free.copy()
        np.put_along_axis(free_after, cols, np.maximum(taken - req.core_milli, 0), axis=1)
        big_a, cnt_a = model.levels(free_after)
        after = model.frag(sum_per_row(free_after), big_a, cnt_a, access, cpu_after)
    return before - after, cols


class FGDPolicy(StatelessPolicy):
    """FGD with a fixed class table (from the original trace, before inflation)."""

    def __init__(self, classes: Mapping[ClassKey, float], *, name: str = "fgd") -> None:
        self.name = name
        self.model = FragModel(classes)
        self.cache = NodeFrag(self.model)

    def choose(self, view: FitView) -> Choice:
        if len(view.rows) == 0:
            return empty_choice(view)
        delta, cols = frag_deltas(self.cache, view)
        score = np.floor(PAPER_MAX_SCORE * sigmoid(delta / 1000.0))
        if cols is not None or delta.ndim == 1:
            s = np.where(np.isfinite(delta), score, 0.0)
            if cols is None:
                return empty_choice(view, s)
            return Choice(s, cols)
        score = np.where(np.isfinite(delta), score, -1.0)
        best = np.argmax(score, axis=1)  # first (lowest index) among the best
        return Choice(score[np.arange(score.shape[0]), best], best[:, None].astype(np.int64))
