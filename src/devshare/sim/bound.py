"""An offline upper bound on the GPU allocation any policy can reach at 100% arrival.

With hindsight, a scheduler could choose which of the pods arrived by then to place. Whatever it
places must fit, so it respects, summed over the cluster: GPU capacity, CPU and memory. The LP
relaxation of that choice (each pod placed fractionally, 0..1) bounds
the best integral packing from above. We bound the LP itself through Lagrangian duality, which needs
no solver: for any multipliers ``y >= 0`` on the capacities ``b``,

    max sum_i g_i x_i  <=  y . b + sum_i max(0, g_i - y . a_i)

(weak duality, ``a_i`` = the pod's use of each capacity, ``g_i`` its GPU). Every ``y`` gives a valid
bound; we search a grid of ``y`` and keep the smallest. A pod that fits no empty node is left out.
"""

from __future__ import annotations

import numpy as np

from devshare.sim.replay import MAX_ARRIVED, arrival_order
from devshare.sim.trace import MIB, Trace


def arrived_at_100(trace: Trace, seed: int) -> list[tuple[int, int, int]]:
    """(GPU milli, CPU milli, memory MiB) of the pods arrived until the arrived GPU reaches 100%."""
    cap = trace.gpu_capacity
    out: list[tuple[int, int, int]] = []
    total = 0
    for _, p in arrival_order(trace, seed):
        out.append((p.gpu_total, p.cpu_milli, p.memory_mib))
        total += p.gpu_total
        if total * 100 // cap >= 100:
            break
    return out


def allocation_bound(trace: Trace, seed: int) -> float:
    """Upper bound on allocated GPU % at 100% arrival for ``seed`` (see the module doc)."""
    pods = _placeable(trace, seed)
    if not pods:
        return 0.0
    g = np.array([p[0] for p in pods], np.float64)
    a = np.array([[p[0], p[1], p[2]] for p in pods], np.float64)  # GPU, CPU, memory
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
            # vectorized over y_gpu
            gain = g[None, :] - (y_gpu[:, None] * a[None, :, 0] + prices[None, :])
            val = y_gpu * b[0] + yc * b[1] + ym * b[2] + np.maximum(gain, 0.0).sum(axis=1)
            best = min(best, float(val.min()))
    return min(100.0, best * 100.0 / trace.gpu_capacity)


def _placeable(trace: Trace, seed: int) -> list[tuple[int, int, int]]:
    """Arrived pods that fit at least one empty node (CPU, memory, GPU count)."""
    nodes = np.array([[n.cpu_milli, n.memory_mib, n.gpus] for n in trace.nodes], np.int64)
    out = []
    for gpu, cpu, mem in arrived_at_100(trace, seed):
        cards = -(-gpu // 1000)
        ok = (nodes[:, 0] >= cpu) & (nodes[:, 1] >= mem) & (nodes[:, 2] >= cards)
        if ok.any():
            out.append((gpu, cpu, mem))
    return out


__all__ = ["MAX_ARRIVED", "MIB", "allocation_bound", "arrived_at_100"]
