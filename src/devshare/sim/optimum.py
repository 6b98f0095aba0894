"""The exact offline optimum of the GPU-only relaxation, and the floor of a replay that places every pod
arriving before 95%.

**The problem.** The pods arrived when the arrived GPU reaches 100% of the cluster's (those that fit at
least one empty node) are packed, with hindsight, into the cluster's cards of 1000 milli-GPU: a share
(``num_gpu`` = 1, below 1000) goes on one card beside others whose shares sum to at most 1000; a pod
of ``k`` whole GPUs takes ``k`` whole cards anywhere. Nodes, CPU, memory and GPU models are dropped,
so every real placement (any policy's replay included) is a feasible packing: the most milli-GPU this
packing can hold bounds the allocation of every policy from above, and 100 minus it in percent bounds
the unallocated GPU from below. :func:`optimum` solves it exactly.

**The floor.** An online replay cannot leave a pod out while it still fits somewhere, so in practice
every pod that arrives before the cluster is nearly full is placed (devshare and FGD place every pod
that arrives before about 95% of the capacity on every seed of the openb traces). Adding that as a
constraint (every pod arriving before 95% is packed) gives a second exact optimum, :func:`floor`,
which bounds every replay that did place those pods: the report says, per run, whether it did
(``RunResult.extra["first_skip_pct"]``, the arrived % at the first pod it skipped).

**The model** (arc flow, Valério de Carvalho 1999). A card is a path from 0 to 1000 on the positions
0..1000: an *item arc* ``p -> p + s`` per share size ``s`` (the card holds a share of ``s``), a *loss
arc* ``p -> 1000`` (the rest of the card stays free). Integer flows: ``z`` paths (the cards given to
shares) plus ``w`` whole-card asks, ``z + w`` = the cards; the flow on the item arcs of size ``s`` is
how many shares of ``s`` are packed, at most the number arrived (at least the number forced); the
objective is ``1000 w + sum s x flow``. Item arcs are only laid on decreasing paths (a card's shares in
decreasing order, the usual symmetry reduction), so positions are those reached by sums of the sizes.
Every integer flow decomposes into paths, i.e. into cards, so the integer program's optimum is the
packing's. It is solved by HiGHS (``highspy``, the standard open LP/MIP solver, MIT licensed) to a
relative gap of zero; with the 20 share sizes of the openb traces it has about 5,000 integer variables
and takes a few seconds. A result that is not proven optimal (``HiGHS`` stopped by its time limit) is
flagged ``exact = False``; its value is then HiGHS's dual bound, still a valid bound.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from devshare.engine.policies.pairing import highs, item_arcs
from devshare.sim.replay import arrival_order
from devshare.sim.trace import Trace, TracePod

CARD = 1000  # milli-GPU of one card
FLOOR_PCT = 95  # pods arriving before this arrived % are forced into the floor's packing
TIME_LIMIT = 120.0  # seconds HiGHS may take on one problem


@dataclass(frozen=True)
class Packing:
    """The most milli-GPU a set of asks can place in ``cards`` cards (``value``), and how long the solve took."""

    value: int  # milli-GPU packed (an upper bound when not exact)
    cards: int
    seconds: float
    exact: bool = True

    @property
    def unallocated_pct(self) -> float:
        return 100.0 - self.value * 100.0 / (self.cards * CARD) if self.cards else 0.0


def solve(cards: int, shares: Mapping[int, int], whole: int = 0, *, forced_shares: Mapping[int, int] | None = None,
          forced_whole: int = 0, capacity: int = CARD, time_limit: float = TIME_LIMIT) -> Packing:
    """The most capacity-units of ``shares`` (size -> count, each size in 1..capacity-1) and ``whole``
    whole-card asks that ``cards`` cards of ``capacity`` hold, packing at least ``forced_shares`` and
    ``forced_whole`` of them. Raises ``ValueError`` when the forced asks cannot all be packed."""
    started = time.perf_counter()
    forced = {s: n for s, n in (forced_shares or {}).items() if n > 0}
    for s, n in forced.items():
        if n > shares.get(s, 0):
            raise ValueError(f"{n} forced shares of {s}, only {shares.get(s, 0)} asked")
    if forced_whole > whole:
        raise ValueError(f"{forced_whole} forced whole cards, only {whole} asked")
    sizes = sorted((s for s, n in shares.items() if n > 0), reverse=True)
    for s in sizes:
        if not 0 < s < capacity:
            raise ValueError(f"a share must be between 1 and {capacity - 1}, got {s}")
    if cards <= 0:
        if forced or forced_whole:
            raise ValueError("forced asks but no card")
        return Packing(0, max(cards, 0), time.perf_counter() - started)
    if not sizes:
        if forced_whole > cards:
            raise ValueError(f"{forced_whole} forced whole cards, {cards} cards")
        return Packing(min(whole, cards) * capacity, cards, time.perf_counter() - started)

    # item arcs on decreasing paths (a card's shares, largest first): at most the copies that exist
    tails, kinds, inner = item_arcs(sizes, [min(shares[s], capacity // s) for s in sizes], capacity)
    row_of = {p: i for i, p in enumerate(inner)}  # conservation rows 0..len(inner)-1

    n_item = len(tails)
    # columns: item arcs, loss arcs (from 0 and every inner position to capacity), w (whole cards)
    loss_tails = [0, *inner]
    n_cols = n_item + len(loss_tails) + 1
    n_cons = len(inner)
    r_cards = n_cons  # z + w = cards: flow out of 0 + w
    r_demand0 = n_cons + 1  # one row per size
    n_rows = r_demand0 + len(sizes)
    col_rows: list[list[tuple[int, float]]] = []
    cost: list[float] = []
    for t, k in zip(tails, kinds, strict=True):
        s = sizes[k]
        entries: list[tuple[int, float]] = []
        if t == 0:
            entries.append((r_cards, 1.0))
        else:
            entries.append((row_of[t], -1.0))  # leaves t
        head = t + s
        if head < capacity:
            entries.append((row_of[head], 1.0))  # enters head
        entries.append((r_demand0 + k, 1.0))
        col_rows.append(entries)
        cost.append(float(s))
    for t in loss_tails:
        col_rows.append([(r_cards, 1.0)] if t == 0 else [(row_of[t], -1.0)])
        cost.append(0.0)
    col_rows.append([(r_cards, 1.0)])  # w
    cost.append(float(capacity))

    row_lo = [0.0] * n_cons + [float(cards)] + [float(forced.get(s, 0)) for s in sizes]
    row_hi = [0.0] * n_cons + [float(cards)] + [float(shares[s]) for s in sizes]
    col_lo = [0.0] * n_cols
    col_hi = [float(min(shares[sizes[k]], cards * (capacity // sizes[k]))) for k in kinds]
    col_hi += [float(cards)] * len(loss_tails)
    col_lo[-1] = float(forced_whole)
    col_hi.append(float(min(whole, cards)))
    if forced_whole > cards:
        raise ValueError(f"{forced_whole} forced whole cards, {cards} cards")

    import highspy

    lp = highspy.HighsLp()
    lp.num_col_ = n_cols
    lp.num_row_ = n_rows
    lp.sense_ = highspy.ObjSense.kMaximize
    lp.col_cost_ = np.array(cost)
    lp.col_lower_ = np.array(col_lo)
    lp.col_upper_ = np.array(col_hi)
    lp.row_lower_ = np.array(row_lo)
    lp.row_upper_ = np.array(row_hi)
    start = [0]
    index: list[int] = []
    value: list[float] = []
    for entries in col_rows:
        for r, v in sorted(entries):
            index.append(r)
            value.append(v)
        start.append(len(index))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = np.array(start, np.int32)
    lp.a_matrix_.index_ = np.array(index, np.int32)
    lp.a_matrix_.value_ = np.array(value)
    integer = highspy.HighsVarType.kInteger
    cont = highspy.HighsVarType.kContinuous
    lp.integrality_ = [integer] * n_item + [cont] * len(loss_tails) + [integer]
    h = highs()
    h.setOptionValue("mip_rel_gap", 0.0)
    h.setOptionValue("mip_abs_gap", 0.99)  # the objective is an integer: a gap below 1 is zero
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("threads", 1)
    h.passModel(lp)
    h.run()
    status = h.getModelStatus()
    if status == highspy.HighsModelStatus.kInfeasible:
        raise ValueError("the forced asks cannot all be packed")
    info = h.getInfo()
    exact = status == highspy.HighsModelStatus.kOptimal
    # stopped early (not exact): HiGHS's dual bound is still an upper bound on the packing
    best = round(info.objective_function_value) if exact else int(np.floor(info.mip_dual_bound + 1e-6))
    return Packing(best, cards, time.perf_counter() - started, exact)


def arrived(trace: Trace, seed: int, pct: int = 100) -> list[TracePod]:
    """The pods arrived until the arrived GPU reaches ``pct``% of the cluster's (the one that reaches
    it included), in arrival order."""
    cap = trace.gpu_capacity
    out: list[TracePod] = []
    total = 0
    for _, p in arrival_order(trace, seed):
        if total * 100 // cap >= pct:
            break
        out.append(p)
        total += p.gpu_total
    return out


def placeable(trace: Trace, pods: list[TracePod]) -> list[bool]:
    """Whether each pod fits at least one empty node (CPU, memory, GPU count, GPU model)."""
    nodes = np.array([[n.cpu_milli, n.memory_mib, n.gpus] for n in trace.nodes], np.int64)
    models = np.array([n.model for n in trace.nodes], object)
    out: list[bool] = []
    memo: dict[tuple[int, int, int, tuple[str, ...]], bool] = {}
    for p in pods:
        key = (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_spec)
        hit = memo.get(key)
        if hit is None:
            ok = (nodes[:, 0] >= p.cpu_milli) & (nodes[:, 1] >= p.memory_mib) & (nodes[:, 2] >= p.num_gpu)
            if p.gpu_spec and p.num_gpu:
                ok &= np.isin(models, list(p.gpu_spec))
            hit = memo[key] = bool(ok.any())
        out.append(hit)
    return out


def _asks(pods: list[TracePod]) -> tuple[Counter[int], int]:
    shares: Counter[int] = Counter()
    whole = 0
    for p in pods:
        if not p.num_gpu:
            continue
        if p.gpu_milli >= CARD:
            whole += p.num_gpu
        else:
            shares[p.gpu_milli] += p.num_gpu
    return shares, whole


def optimum(trace: Trace, seed: int, pct: int = 100) -> Packing:
    """The exact optimum of the GPU-only relaxation at ``pct``% arrival for ``seed`` (module doc)."""
    pods = arrived(trace, seed, pct)
    pods = [p for p, ok in zip(pods, placeable(trace, pods), strict=True) if ok]
    shares, whole = _asks(pods)
    return solve(trace.gpu_capacity // CARD, shares, whole)


def floor(trace: Trace, seed: int, pct: int = FLOOR_PCT) -> Packing | None:
    """The optimum at 100% arrival with every pod arriving before ``pct``% of the capacity packed
    (module doc); None when those pods cannot all be packed (then no replay places them all)."""
    pods = arrived(trace, seed)
    ok = placeable(trace, pods)
    early = arrived(trace, seed, pct)
    forced_pods = [p for p, fits in zip(early, ok, strict=False) if fits]
    pods = [p for p, fits in zip(pods, ok, strict=True) if fits]
    shares, whole = _asks(pods)
    fshares, fwhole = _asks(forced_pods)
    try:
        return solve(trace.gpu_capacity // CARD, shares, whole, forced_shares=fshares, forced_whole=fwhole)
    except ValueError:
        return None


CURVE_POINTS = (85, 90, 95, 100, 105, 110, 115, 120, 125, 130)  # arrived % where the plot's optimum line is solved


@dataclass(frozen=True)
class Offline:
    """One seed's offline figures: the optimum and the floor at 100% arrival, and the optimum's
    allocation % at a few arrived % for the plot."""

    seed: int
    optimum: Packing
    floor: Packing | None  # None: the pods arriving before 95% cannot all be packed
    curve: dict[int, float]  # arrived % -> the optimum's allocated GPU %


def offline(trace: Trace, seed: int, points: tuple[int, ...] = CURVE_POINTS) -> Offline:
    curve = {100: 0.0}
    opt = optimum(trace, seed)
    for x in points:
        curve[x] = 100.0 - (opt.unallocated_pct if x == 100 else optimum(trace, seed, x).unallocated_pct)
    return Offline(seed, opt, floor(trace, seed), dict(sorted(curve.items())))


__all__ = ["CARD", "CURVE_POINTS", "FLOOR_PCT", "Offline", "Packing", "arrived", "floor", "offline", "optimum",
           "placeable", "solve"]
