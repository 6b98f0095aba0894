"""What a share is worth in the best packing of the learned mix: the prices of the cutting-stock LP.

The offline optimum on the openb traces completes a few pairings and triples (470 + 470, 650 + 320,
590 + 370, 550 + 230 + 220, ...). Which ones depends on the mix: how many 650s there are for the 320s,
whether the 230s have 550s and 220s to go with. The linear program that packs a mix of shares into the
fewest cards (:func:`share_prices`) says it through its dual: a price ``y_s`` per share size, in cards,
such that no card's shares are worth more than one card together, and the cards of the optimal
packing are worth exactly one. A 470 is worth 1/2, a 650 2/3 and a 320 1/3 when 650 + 320 and
320 x 3 are the ways to use them, an 810 a whole card (nothing fills its 190 often enough), and a 110
or 160 nothing (there are far more 190 gaps than shares to fill them).

A card's free share ``r`` is then worth :func:`best_value` ``V(r)``: the most the shares that fit it
are worth. Putting a share ``s`` into a gap ``r`` loses ``V(r) - V(r - s) - y_s`` >= 0 cards of
value: nothing when it is one of the packing's pairings (a 320 into the 350 beside a 650), 0.08 when a
230 takes that 350 instead (the 120 left is worth nothing, the 350 was worth a 320). This is the
value the policy's remainder table uses (:func:`devshare.engine.policies.remainder.paired_waste_tables_by_cpu`).

The program is an arc flow (Valério de Carvalho 1999) like the simulator's exact optimum
(:mod:`devshare.sim.optimum`, which builds its arcs with :func:`item_arcs`); with the 20 share sizes of
the openb traces it is a few thousand arcs and HiGHS solves its relaxation in tens of milliseconds.
It is solved when the policy rebuilds its class table, never on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from devshare.engine.policies.base import Floats
from devshare.model.request import WHOLE


def plain_highs() -> Any:
    """A ``highspy.Highs`` solver as the library makes it."""
    import highspy as module

    highspy: Any = module  # untyped
    return highspy.Highs()


# How a solver is made. HiGHS prints a banner on stdout (from C) when a process makes its first one;
# the layers that own a process's stdout (the CLI, the simulator's workers) install one that keeps it
# off (devshare.sim.solver.quiet_highs): the engine does no I/O itself.
make_solver: Callable[[], Any] = plain_highs


def highs() -> Any:
    """A solver with its own log off."""
    h = make_solver()
    h.setOptionValue("output_flag", False)
    return h


def item_arcs(sizes: Sequence[int], most: Sequence[int], capacity: int) -> tuple[list[int], list[int], list[int]]:
    """The item arcs of the arc-flow graph of one card: ``sizes`` in decreasing order, at most ``most[k]``
    copies of ``sizes[k]`` on one card. An arc of size ``s`` leaves every position reached by the sizes
    >= s (a card's shares in decreasing order: the usual symmetry reduction). Returns the arcs' tails and
    kinds (index into ``sizes``) and the inner positions (0 < p < capacity) the arcs reach."""
    reached = np.zeros(capacity + 1, bool)
    reached[0] = True
    tails: list[int] = []
    kinds: list[int] = []
    for k, s in enumerate(sizes):
        for _ in range(most[k] - 1):  # positions reached by sizes >= s: chains of s from those reached so far
            grown = reached.copy()
            grown[s:] |= reached[:-s]
            if (grown == reached).all():
                break
            reached = grown
        starts = np.flatnonzero(reached[: capacity - s + 1])
        tails += starts.tolist()
        kinds += [k] * len(starts)
        reached[starts + s] = True
    inner = [int(p) for p in np.flatnonzero(reached) if 0 < p < capacity]
    return tails, kinds, inner


def share_prices(mix: Mapping[int, float], capacity: int = WHOLE) -> dict[int, float] | None:
    """The dual prices ``y_s`` (in cards) of the LP relaxation of packing ``mix`` (share size -> how
    many, any positive scale) into the fewest cards of ``capacity``; None when HiGHS finds no optimum.
    Every card's shares are worth at most 1 together, the cards of an optimal packing exactly 1."""
    import highspy

    sizes = sorted((s for s, n in mix.items() if n > 0 and 0 < s < capacity), reverse=True)
    if not sizes:
        return {}
    tails, kinds, inner = item_arcs(sizes, [capacity // s for s in sizes], capacity)
    row_of = {p: i for i, p in enumerate(inner)}
    demand0 = len(inner)  # conservation rows first, then one demand row per size
    start = [0]
    index: list[int] = []
    value: list[float] = []
    cost: list[float] = []
    for t, k in zip(tails, kinds, strict=True):
        head = t + sizes[k]
        entries = [] if t == 0 else [(row_of[t], -1.0)]
        if head < capacity:
            entries.append((row_of[head], 1.0))
        entries.append((demand0 + k, 1.0))
        for r, v in sorted(entries):
            index.append(r)
            value.append(v)
        start.append(len(index))
        cost.append(1.0 if t == 0 else 0.0)  # a path leaving 0 is one card
    for t in inner:  # loss arcs: the rest of a card stays free
        index.append(row_of[t])
        value.append(-1.0)
        start.append(len(index))
        cost.append(0.0)
    lp = highspy.HighsLp()
    lp.num_col_ = len(cost)
    lp.num_row_ = demand0 + len(sizes)
    lp.col_cost_ = np.array(cost)
    lp.col_lower_ = np.zeros(len(cost))
    lp.col_upper_ = np.full(len(cost), highspy.kHighsInf)
    total = float(sum(mix[s] for s in sizes))
    lp.row_lower_ = np.array([0.0] * demand0 + [mix[s] / total for s in sizes])
    lp.row_upper_ = np.array([0.0] * demand0 + [highspy.kHighsInf] * len(sizes))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.array(start, np.int32)
    lp.a_matrix_.index_ = np.array(index, np.int32)
    lp.a_matrix_.value_ = np.array(value)
    h = highs()
    h.setOptionValue("threads", 1)
    # the interior point method without crossover: where the optimal prices are not unique (as many 320s
    # as 650s: a 320 is worth anything from 0 to 1/3), an interior point of them rather than an extreme one
    h.setOptionValue("solver", "ipm")
    h.setOptionValue("run_crossover", "off")
    h.passModel(lp)
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        return None
    duals = h.getSolution().row_dual
    return {s: max(0.0, float(duals[demand0 + k])) for k, s in enumerate(sizes)}


def best_value(prices: Mapping[int, float], capacity: int = WHOLE) -> Floats:
    """``[capacity + 1]``: ``V(r)``, the most the shares of ``prices`` (any number of each) that fit in
    ``r`` are worth together (an unbounded knapsack; per share size, the gaps in blocks of that size, each
    block from the one before it)."""
    v = np.zeros(capacity + 1, np.float64)
    for s, y in sorted(prices.items()):
        if not 0 < s <= capacity or y <= 0:
            continue
        for a in range(s, capacity + 1, s):
            b = min(a + s, capacity + 1)
            np.maximum(v[a:b], v[a - s:b - s] + y, out=v[a:b])
    return v
