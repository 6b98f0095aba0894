"""Offline upper bounds on the GPU allocation any policy can reach at 100% arrival.

With hindsight, a scheduler could choose which of the pods arrived by then to place, and where.
Two relaxations of that choice each bound the best packing from above; the smaller one is kept.

- **Capacities** (:func:`capacity_bound`). Whatever is placed respects, summed over the cluster,
  GPU, CPU and memory. The LP relaxation (each pod placed fractionally, 0..1) is bounded through
  Lagrangian duality, which needs no solver: for any multipliers ``y >= 0`` on the capacities ``b``,
  ``max sum_i g_i x_i <= y . b + sum_i max(0, g_i - y . a_i)`` (``a_i``: the pod's use of each
  capacity, ``g_i`` its GPU); a grid of ``y`` is searched. On the openb traces CPU and memory never
  run out in aggregate, so this says only "everything".
- **Cards** (:func:`card_bound`). The GPU asks packed into the cluster's cards, nodes, CPU, memory
  and models ignored (a k-GPU pod becomes k whole cards anywhere), bounded by dual feasible
  functions (as in bin packing's lower bounds): for ``eps`` <= 500, an ask above ``1000 - eps``
  weighs one card, an ask of at least ``eps`` its size, a smaller one nothing; no card can hold more
  than one card's weight, so the asks placed weigh at most the card count, and the most GPU of that
  weight is a fractional knapsack. The smallest over every ``eps`` between the asks' sizes is kept.
  This sees the structural waste of the traces: 13% of the default trace's pods ask 810 milli and
  leave 190 that almost nothing fits.

A pod that fits no empty node is left out of both.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from devshare.sim.replay import MAX_ARRIVED, arrival_order
from devshare.sim.trace import MIB, Trace, TracePod

CARD = 1000  # milli-GPU of one card


def arrived_at_100(trace: Trace, seed: int) -> list[TracePod]:
    """The pods arrived until the arrived GPU reaches 100% of the cluster's."""
    cap = trace.gpu_capacity
    out: list[TracePod] = []
    total = 0
    for _, p in arrival_order(trace, seed):
        out.append(p)
        total += p.gpu_total
        if total * 100 // cap >= 100:
            break
    return out


def allocation_bound(trace: Trace, seed: int) -> float:
    """Upper bound on allocated GPU % at 100% arrival for ``seed``: the smaller of the two bounds."""
    pods = _placeable(trace, seed)
    if not pods:
        return 0.0
    return min(capacity_bound(trace, pods), card_bound(trace.gpu_capacity // CARD, _card_asks(pods))
               * 100.0 / trace.gpu_capacity)


def capacity_bound(trace: Trace, pods: list[TracePod]) -> float:
    """Allocated GPU % bound of the aggregate capacities' LP (see the module doc)."""
    g = np.array([p.gpu_total for p in pods], np.float64)
    a = np.array([[p.gpu_total, p.cpu_milli, p.memory_mib] for p in pods], np.float64)  # GPU, CPU, memory
    b = np.array([trace.gpu_capacity, sum(n.cpu_milli for n in trace.nodes),
                  sum(n.memory_mib for n in trace.nodes)], np.float64)
    best = float(g.sum())  # y = 0
    if (a.sum(axis=0)[1:] <= b[1:]).all():  # CPU and memory never bind: the LP optimum itself
        return min(100.0, best * 100.0 / trace.gpu_capacity)
    # y_gpu in [0, 1]; CPU and memory prices in GPU-milli per unit, on a log grid
    y_gpu = np.linspace(0.0, 1.0, 41)
    y_cpu = np.concatenate(([0.0], np.geomspace(1e-4, 10.0, 16)))
    y_mem = np.concatenate(([0.0], np.geomspace(1e-4, 10.0, 16)))
    for yc in y_cpu:
        for ym in y_mem:
            prices = a[:, 1] * yc + a[:, 2] * ym
            gain = g[None, :] - (y_gpu[:, None] * a[None, :, 0] + prices[None, :])  # over y_gpu at once
            val = y_gpu * b[0] + yc * b[1] + ym * b[2] + np.maximum(gain, 0.0).sum(axis=1)
            best = min(best, float(val.min()))
    return min(100.0, best * 100.0 / trace.gpu_capacity)


def card_bound(cards: int, asks: Iterable[int]) -> float:
    """Upper bound on the milli-GPU of ``asks`` (each at most one card) packable into ``cards``
    cards of 1000 (see the module doc)."""
    sizes = np.sort(np.fromiter(asks, np.int64))[::-1]
    best = float(min(int(sizes.sum()), CARD * cards))
    # the weights change only where eps passes an ask's size, or 1000 - eps does
    cuts = {1, CARD // 2} | {int(t) + 1 for t in sizes} | {CARD - int(t) + 1 for t in sizes}
    for eps in sorted(e for e in cuts if 1 <= e <= CARD // 2):
        best = min(best, _dual_bound(cards, sizes, eps))
    return best


def _dual_bound(cards: int, sizes: npt.NDArray[np.int64], eps: int) -> float:
    """The bound of one dual feasible function (``eps`` <= 500): an ask above ``1000 - eps`` weighs a
    whole card, one of at least ``eps`` its size in cards, a smaller one nothing. No card's asks weigh
    more than one card (beside an ask above ``1000 - eps`` only asks below ``eps`` fit), so the asks
    placed weigh at most ``cards``: the most milli-GPU of that weight is a fractional knapsack,
    taken by value per weight: the weightless asks, then the middle ones (1000 per card), then the
    large ones, largest first (sizes are sorted largest first)."""
    large = sizes[sizes > CARD - eps]
    middle = sizes[(sizes >= eps) & (sizes <= CARD - eps)]
    value = int(sizes[sizes < eps].sum())
    room = cards * CARD  # weight left, in thousandths of a card (exact integers throughout)
    take = min(room, int(middle.sum()))
    value += take
    room -= take
    whole = min(room // CARD, len(large))
    value += int(large[:whole].sum())
    if whole < len(large):
        value += -(-(room - whole * CARD) * int(large[whole]) // CARD)  # the fraction, rounded up
    return float(value)


def _card_asks(pods: list[TracePod]) -> list[int]:
    """Each pod's GPU ask per card: k whole cards, or one share."""
    out: list[int] = []
    for p in pods:
        out += [p.gpu_milli] * p.num_gpu
    return out


def _placeable(trace: Trace, seed: int) -> list[TracePod]:
    """Arrived pods that fit at least one empty node (CPU, memory, GPU count)."""
    nodes = np.array([[n.cpu_milli, n.memory_mib, n.gpus] for n in trace.nodes], np.int64)
    return [p for p in arrived_at_100(trace, seed)
            if ((nodes[:, 0] >= p.cpu_milli) & (nodes[:, 1] >= p.memory_mib) & (nodes[:, 2] >= p.num_gpu)).any()]


__all__ = ["MAX_ARRIVED", "MIB", "allocation_bound", "arrived_at_100", "capacity_bound", "card_bound"]
