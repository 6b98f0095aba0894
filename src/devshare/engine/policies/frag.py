"""GPU fragmentation of nodes against a distribution of task classes (FGD, ATC'23), vectorized.

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

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

ClassKey = tuple[int, int, int, tuple[str, ...]]  # (cpu milli, per-GPU milli, GPU count, models)


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
