"""FGD, fragmentation gradient descent (Weng et al., USENIX ATC 2023), as the published simulator
scores it: ``int(100 x sigmoid((F before - F after) / 1000))``; a share tries every fitting card and
keeps the best (lowest index on ties); whole cards are taken lowest index first. Its fragmentation
model (:class:`FragModel`) is what devshare's own policy builds on.

The fragmentation of nodes against a distribution of task classes, vectorized:

A task class is ``(cpu milli, per-GPU milli, GPU count, allowed models)`` with a probability ``p``.
The fragmentation of a node for class ``m`` is the node's free milli-GPU that ``m`` cannot use:
all of it when ``m`` asks no GPU, may not use the node's model, lacks CPU there, or finds fewer than
its count of cards with its share free; otherwise the free milli-GPU on cards whose free share is below
its per-GPU ask. ``F(node) = sum_m p_m frag_m(node)``.

Rewritten for arrays: with ``big_t`` = free milli-GPU on cards with at least ``t`` free and ``cnt_t`` =
the number of such cards, ``F = total_free - sum_g ok_g * P_g(cpu_left) * big_t(g)``, where a group ``g``
gathers the classes with the same (per-GPU milli, count, models), ``ok_g`` says the node's model is
allowed and ``cnt_t(g) >= count``, and ``P_g(x)`` sums ``p`` over the group's classes asking at most
``x`` CPU. Only the distinct thresholds ``t`` need per-card work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache

import numpy as np

from devshare.engine.fit import FitView, any_per_row, sum_per_row
from devshare.engine.policies.base import (
    PAPER_MAX_SCORE,
    Choice,
    Floats,
    Ints,
    Mask,
    StatelessPolicy,
    empty_choice,
    lowest_columns,
)
from devshare.engine.state import ClusterState
from devshare.model import names
from devshare.model.request import PodRequest

ClassKey = tuple[int, int, int, tuple[str, ...]]  # (cpu milli, per-GPU milli, GPU count, models)


def pod_gpu(pod: PodRequest) -> tuple[int, int]:
    """(GPU count, per-GPU milli) of the pod's first GPU ask; (0, 0) for none."""
    for c in pod.containers:
        for d in c.devices:
            if d.type == names.GPU:
                return d.count, d.core_milli
    return 0, 0


def class_key(pod: PodRequest) -> ClassKey:
    """The pod's task class (the key of :class:`FragModel`'s classes)."""
    count, milli = pod_gpu(pod)
    return (pod.cpu_milli, milli if count else 0, count, tuple(sorted(pod.gpu_models)))


class NodeModels:
    """The GPU model of every row as a small integer code into ``names``, made once per layout of the
    cluster (nodes and devices) and shared by every policy on the state."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def codes(self, state: ClusterState, rows: Ints) -> Ints:
        self.names, codes = state.caches.per_layout("gpu model codes", lambda: model_codes(state))
        return codes[rows]


def model_codes(state: ClusterState) -> tuple[list[str], Ints]:
    """The distinct GPU models (in row order of first use) and each row's index into them."""
    names_: dict[str, int] = {}
    codes = np.zeros(max(state.n_rows, 1), np.int64)
    for row in state.row_of.values():
        codes[row] = names_.setdefault(state.gpu_model(row), len(names_))
    return list(names_), codes


def top_classes(counts: Mapping[ClassKey, float], coverage: float = 0.95) -> dict[ClassKey, float]:
    """The most frequent classes until they cover ``coverage`` of the weight, renormalised to sum 1
    (ties in count: the key order, so the choice is deterministic)."""
    total = float(sum(counts.values()))
    if total <= 0:
        return {}
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    kept: dict[ClassKey, float] = {}
    acc = 0.0
    for k, v in ranked:
        if acc >= coverage * total - 1e-9:
            break
        kept[k] = float(v)
        acc += v
    s = sum(kept.values())
    return {k: v / s for k, v in kept.items()}


class FragModel:
    """Expected fragmentation of nodes for a fixed class distribution.

    Works on per-node aggregates: ``total[P]`` free milli-GPU, ``big[T, P]`` and ``cnt[T, P]`` per
    threshold, the model access ``[G, P]`` and the CPU left ``[P]`` of P node states (a node now, or a
    node with the pod tried on one of its cards)."""

    def __init__(self, classes: Mapping[ClassKey, float]) -> None:
        self.classes = dict(classes)
        by_group: dict[tuple[int, int, tuple[str, ...]], list[tuple[int, float]]] = {}
        for (cpu, milli, count, models), p in self.classes.items():
            if milli <= 0 or count <= 0:
                continue  # CPU-only classes: all free GPU is fragment, whatever the node
            by_group.setdefault((milli, count, tuple(models)), []).append((cpu, p))
        keys = sorted(by_group)
        self.thresholds = np.array(sorted({k[0] for k in keys}), np.int64)
        self.group_models = [k[2] for k in keys]
        self.group_threshold = np.array([int(np.searchsorted(self.thresholds, k[0])) for k in keys], np.int64)
        self.group_count = np.array([k[1] for k in keys], np.int64)
        # P_g(x) as a table over the distinct CPU asks: weight[g, searchsorted(cpus, x, right)]
        cpus = sorted({c for items in by_group.values() for c, _ in items})
        self.cpus = np.array(cpus, np.int64)
        table = np.zeros((len(keys), len(cpus) + 1), np.float64)
        for gi, k in enumerate(keys):
            for c, p in by_group[k]:
                table[gi, cpus.index(c) + 1:] += p
        self.weight_table = table
        self.total_p = float(sum(self.classes.values()))
        self._access: dict[str, Mask] = {}

    @property
    def n_groups(self) -> int:
        return len(self.group_models)

    def access(self, models: Iterable[str]) -> Mask:
        """``[G, len(models)]``: may each group's classes use a node of each model?"""
        cols = []
        for m in models:
            a = self._access.get(m)
            if a is None:
                a = np.array([not gm or m in gm for gm in self.group_models], np.bool_)
                self._access[m] = a
            cols.append(a)
        if not cols:
            return np.zeros((self.n_groups, 0), np.bool_)
        return np.stack(cols, axis=1)

    def cpu_weight(self, cpu_left: Ints) -> Floats:
        """``[G, P]``: P_g(cpu_left), the weight of each group's classes that fit the CPU left."""
        idx = np.searchsorted(self.cpus, cpu_left, side="right")
        return np.asarray(self.weight_table[:, idx], np.float64)

    def levels(self, free: Ints) -> tuple[Ints, Ints]:
        """``big[T, M]`` and ``cnt[T, M]`` for per-card free ``[M, W]`` (0 on absent cards)."""
        t = self.thresholds[:, None, None]
        ge = free[None, :, :] >= t
        return np.where(ge, free[None, :, :], 0).sum(axis=2), ge.sum(axis=2)

    def frag(self, total: Ints, big: Ints, cnt: Ints, access: Mask, cpu_left: Ints) -> Floats:
        """F of P node states."""
        out = total * self.total_p
        if not self.n_groups:
            return np.asarray(out, np.float64)
        gi = self.group_threshold
        ok = (cnt[gi] >= self.group_count[:, None]) & access
        usable = np.where(ok, big[gi], 0) * self.cpu_weight(cpu_left)
        return np.asarray(out - usable.sum(axis=0), np.float64)

    def frag_after_share(self, free: Ints, rows: Ints, cols: Ints, total: Ints, big: Ints, cnt: Ints,
                         access: Mask, cpu_after: Ints, share: int) -> Floats:
        """F once ``share`` milli of card ``cols[k]`` of node ``rows[k]`` is taken, for each k.
        ``total``/``big``/``cnt``/``access``/``cpu_after`` are per node (indexed by ``rows``);
        ``cpu_after`` already lacks the pod's CPU."""
        f = free[rows, cols]
        t = self.thresholds[:, None]
        before = f[None, :] >= t
        after = (f[None, :] - share) >= t
        big_k = big[:, rows] - np.where(before, f[None, :], 0) + np.where(after, f[None, :] - share, 0)
        cnt_k = cnt[:, rows] - before + after
        return self.frag(total[rows] - share, big_k, cnt_k, access[:, rows], cpu_after[rows])


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
        free = view.gpu_free
        cpu = view.cpu_left
        codes = self.models.codes(state, rows)
        access = model.access(self.models.names)[:, codes]
        self._fit(max(state.n_rows, int(rows.max()) + 1), free.shape[1])
        total = sum_per_row(free)
        stale = ~self.valid[rows] | (self.cpu[rows] != cpu) | any_per_row(self.free[rows] != free)
        if stale.any():
            k = np.flatnonzero(stale)
            r = rows[k]
            big, cnt = model.levels(free[k])
            self.free[r] = free[k]
            self.cpu[r] = cpu[k]
            self.big[:, r] = big
            self.cnt[:, r] = cnt
            self.frag[r] = model.frag(total[k], big, cnt, access[:, k], cpu[k])
            self.valid[r] = True
        return free, cpu, total, self.big[:, rows], self.cnt[:, rows], access, self.frag[rows]


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
