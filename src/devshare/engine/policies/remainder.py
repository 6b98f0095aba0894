"""What a card's leftover share is worth: its expected eventual waste under a task mix.

FGD charges a card with ``r`` milli-GPU free ``r x P(share > r)`` for the share classes (the part of
``r`` the *next* task of each class could not use). That over-charges a large remainder such as 680
(the most frequent tasks, whole cards and 810, do not fit it, yet 650, 470 or 590 will, leaving 30 to
210) and under-charges a small one such as 190 (almost nothing ever fits it again). :func:`waste_table`
instead estimates the waste the card is *left with in the end*:

    W(r) = r                                              when no share fits r
    W(r) = (1 - a(r)) r + a(r) E[W(r - s) | s <= r]       otherwise,  a(r) = P(s <= r) / (P(s <= r) + kappa)

``a(r)`` is the chance a fitting task comes for the card before the cluster fills (rare fits, such as
the 160/110/50 shares that fit a 190 sliver, are mostly never used), and the expectation is over the
share classes that fit, in proportion to their frequency. A free card (1000) is worth nothing wasted:
whole-card tasks take it. Values are tabulated on the 1-milli grid 0..1000.

The policy swaps FGD's whole per-card term, :func:`fgd_card_frag` (the share classes' part and the
whole-card classes' ``r x P(whole)`` for any card not fully free), for ``W`` times the weight of those
classes. FGD's whole-card term makes any partly used card cost as much as its free share, so a share
joins a used card even when the remainder it leaves is useless; W charges a partly used card only for
what is expected to stay unused on it.

W assumes a gap is filled by whichever share happens to fit, in proportion to its frequency: a 350
beside a 650 is as likely to get a 230 (leaving 120 for good) as the packing allows, so putting a 230
there looks free, while the optimum keeps that 350 for one of the 320s (650 + 320) and opens a card
for the 230 (550 + 230 + 220). :func:`paired_waste_tables_by_cpu` blends W with the *pairing table*
``r - 1000 V(r) + open_cost x r``, where ``V(r)`` is the most the shares that fit ``r`` are worth at
the prices of the LP that packs the learned mix into the fewest cards
(:mod:`devshare.engine.policies.pairing`): a share placed where the optimum would pair it loses nothing,
one placed elsewhere loses the value its gap could have held. The LP counts on every gap being filled
in the end; ``open_cost`` charges each milli-GPU left open on a used card for the chance it is not (a
share joining a used card gains ``open_cost x 1000`` over one opening a free card).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from devshare.engine.policies.base import Floats, Ints
from devshare.engine.policies.fgd import ClassKey
from devshare.engine.policies.pairing import best_value, share_prices
from devshare.model.request import WHOLE  # milli of one card


def share_mix(classes: Mapping[ClassKey, float]) -> tuple[list[int], list[float]]:
    """The single-card share classes' sizes and probabilities (among all classes) by size."""
    total = float(sum(classes.values())) or 1.0
    mix: dict[int, float] = {}
    for (_cpu, milli, count, _models), p in classes.items():
        if count == 1 and 0 < milli < WHOLE:
            mix[milli] = mix.get(milli, 0.0) + p / total
    sizes = sorted(mix)
    return sizes, [mix[s] for s in sizes]


def whole_weight(classes: Mapping[ClassKey, float]) -> float:
    """The probability (among all classes) of the classes asking whole cards."""
    total = float(sum(classes.values())) or 1.0
    return sum(p for (_c, milli, count, _m), p in classes.items() if count >= 1 and milli >= WHOLE) / total


def fgd_card_frag(classes: Mapping[ClassKey, float]) -> Floats:
    """``[WHOLE + 1]``: FGD's fragmentation of one card by its free milli r, for the classes of one share
    (``r x P(share > r)``) and of whole cards (``r x P(whole)`` unless the card is fully free)."""
    sizes, probs = share_mix(classes)
    s = np.array(sizes, np.int64)
    p = np.array(probs, np.float64)
    r = np.arange(WHOLE + 1)
    above = ((s[None, :] > r[:, None]) * p[None, :]).sum(axis=1)
    return np.asarray(r * above + np.where(r < WHOLE, r * whole_weight(classes), 0.0), np.float64)


def waste_table(classes: Mapping[ClassKey, float], kappa: float) -> Floats:
    """``[WHOLE + 1]``: expected eventual waste W(r) of a card with r milli free (module doc), times
    the probability of the share and whole-card classes, so it is on the scale of :func:`fgd_card_frag`."""
    sizes, probs = share_mix(classes)
    scale = float(sum(probs)) + whole_weight(classes)
    return np.asarray(_eventual_waste(sizes, probs, kappa) * scale, np.float64)


def cpu_share_mixes(classes: Mapping[ClassKey, float]) -> tuple[Ints, list[dict[int, float]], float]:
    """The share classes that a node with ``x`` CPU left can still take, for every distinct CPU ask ``x``
    of the share classes: ``(steps [K], mixes, scale)``, ``mixes[i]`` the share sizes (-> probability
    among all classes) for row ``i`` (row 0: less CPU than any share asks, no share; row
    ``searchsorted(steps, cpu_left, side="right")`` for a node with ``cpu_left``); ``scale``: the
    probability of the share and whole-card classes (the tables' scale, that of :func:`fgd_card_frag`)."""
    total = float(sum(classes.values())) or 1.0
    shares = [(cpu, milli, p / total) for (cpu, milli, count, _m), p in classes.items()
              if count == 1 and 0 < milli < WHOLE]
    steps = sorted({cpu for cpu, _milli, _p in shares})
    _, probs = share_mix(classes)
    mixes: list[dict[int, float]] = [{}]
    for x in steps:
        mix: dict[int, float] = {}
        for cpu, milli, p in shares:
            if cpu <= x:
                mix[milli] = mix.get(milli, 0.0) + p
        mixes.append(mix)
    return np.array(steps, np.int64), mixes, float(sum(probs)) + whole_weight(classes)


def waste_tables_by_cpu(classes: Mapping[ClassKey, float], kappa: float) -> tuple[Ints, Floats]:
    """W(r) when only the share classes asking at most ``x`` CPU can still come to the card, for every
    distinct CPU ask ``x`` of the share classes: ``(steps [K], tables [K + 1, WHOLE + 1])``. Row 0 is for
    a node with less CPU left than any share asks (nothing fills its cards: W(r) = r); row
    ``searchsorted(steps, cpu_left, side="right")`` is the one for a node with ``cpu_left``. The classes
    keep their probability among all classes (a card on a node short of CPU is filled less often), and
    the last row is :func:`waste_table`."""
    steps, mixes, scale = cpu_share_mixes(classes)
    rows = []
    for mix in mixes:
        sizes = sorted(mix)
        rows.append(_eventual_waste(sizes, [mix[k] for k in sizes], kappa))
    return steps, np.asarray(np.stack(rows) * scale, np.float64)


def paired_waste_tables_by_cpu(classes: Mapping[ClassKey, float], kappa: float, *, open_cost: float,
                               blend: float) -> tuple[Ints, Floats]:
    """:func:`waste_tables_by_cpu` blended with the pairing table (module doc): per row, ``blend x``
    ``(r - WHOLE x V(r) + open_cost x r)`` plus ``(1 - blend) x`` the eventual waste, where ``V`` is
    :func:`~devshare.engine.policies.pairing.best_value` of the LP prices of the learned share mix
    (:func:`~devshare.engine.policies.pairing.share_prices`) over the share sizes the row's CPU still
    takes. A free card stays 0. Without prices (no share seen, or no LP optimum) the eventual waste alone."""
    steps, tables = waste_tables_by_cpu(classes, kappa)
    if not blend:
        return steps, tables
    sizes, probs = share_mix(classes)
    prices = share_prices(dict(zip(sizes, probs, strict=True)))
    if not prices:
        return steps, tables
    _, mixes, scale = cpu_share_mixes(classes)
    r = np.arange(WHOLE + 1, dtype=np.float64)
    values: dict[frozenset[int], Floats] = {}
    rows = []
    for mix in mixes:
        key = frozenset(mix)
        v = values.get(key)
        if v is None:
            v = values[key] = best_value({s: prices[s] for s in key if s in prices})
        row = r - WHOLE * v + open_cost * r
        row[WHOLE] = 0.0
        rows.append(row)
    return steps, np.asarray(blend * np.stack(rows) * scale + (1.0 - blend) * tables, np.float64)


def _eventual_waste(sizes: list[int], probs: list[float], kappa: float) -> Floats:
    """W(r) on the 1-milli grid for share ``sizes`` (increasing) with (absolute) probabilities ``probs``.
    W(r) reads W below r by at least the smallest size, so the grid is filled in blocks of that size."""
    w = np.arange(WHOLE + 1, dtype=np.float64)  # no share fits: all of r is wasted
    if sizes:
        s = np.array(sizes, np.int64)
        p = np.array(probs, np.float64)
        cum = np.cumsum(p)
        step = int(s[0])
        for lo in range(step, WHOLE + 1, step):
            r = np.arange(lo, min(lo + step, WHOLE + 1))
            k = np.searchsorted(s, r, side="right")  # shares s[:k] fit
            fits = s[None, :] <= r[:, None]
            fit = cum[k - 1]
            a = fit / (fit + kappa) if kappa > 0 else np.ones_like(fit)
            below = w[np.where(fits, r[:, None] - s[None, :], 0)]
            w[r] = (1.0 - a) * r + a * (np.where(fits, p * below, 0.0)).sum(axis=1) / fit
    w[WHOLE] = 0.0  # a free card goes to whole-card tasks
    return w
