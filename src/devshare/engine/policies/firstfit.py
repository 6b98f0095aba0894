"""kube-scheduler's own DRA allocation, as a policy: the baseline devshare's DRA allocator is measured
against (issue 38; ``devshare simulate --dra-baseline``).

Measured on the e2e control plane (v1.37, default profile) with GPUs published as devices that allow
multiple allocations and each pod asking its share through a claim's capacity requests:

- **device**: the first device of the node that fits, by device index (every one of 6,900 placements);
- **node**: nothing GPU-aware scores it (``DynamicResources`` scores every node alike for such
  claims): the default profile's ``NodeResourcesFit`` (LeastAllocated) plus
  ``NodeResourcesBalancedAllocation`` on CPU and memory, the highest sum winning, ties broken at
  random (kube-scheduler's ``selectHost``).

The scores follow kube-scheduler's code (``pkg/scheduler/framework/plugins/noderesources``, v1.37):
LeastAllocated ``(allocatable - requested) * 100 / allocatable`` per resource with the pod's request
counted (a request of 0 counted as 100m CPU / 200 MiB, its "non-zero" request), averaged; Balanced
``50 + (50 + score_with_pod - score_without_pod) / 2`` with ``score = (1 - |f_cpu - f_mem| / 2) * 100``
over the requested fractions. Which nodes kube-scheduler scores at all (its window of
``percentageOfNodesToScore`` feasible nodes) is the replay's to model (:mod:`devshare.sim.dra`).
"""

from __future__ import annotations

import numpy as np

from devshare.engine.fit import FitView
from devshare.engine.policies.base import Choice, Floats, Ints, StatelessPolicy, empty_choice, lowest_columns
from devshare.engine.steering import whole_gpu_free

MAX_NODE_SCORE = 100
DEFAULT_MILLI_CPU = 100  # schedutil.DefaultMilliCPURequest
DEFAULT_MEMORY = 200 * 2**20  # schedutil.DefaultMemoryRequest


def _div(a: Ints, b: Ints) -> Ints:
    """Go's integer division (truncation toward zero) of int64 arrays."""
    q = np.abs(a) // np.maximum(np.abs(b), 1)
    return np.where((a < 0) != (b < 0), -q, q)


def least_allocated(alloc: Ints, used: Ints, ask: int) -> Ints:
    requested = used + ask
    score = _div((alloc - requested) * MAX_NODE_SCORE, alloc)
    return np.where((alloc == 0) | (requested > alloc), 0, score)


TAINT_TOLERATION_WEIGHT = 3  # the default profile's weight of TaintToleration (NodeResourcesFit's is 1)


def taint_toleration(intolerable: Ints) -> Ints:
    """kube-scheduler's TaintToleration score: per node, its PreferNoSchedule taints the pod does not
    tolerate, normalised in reverse over the nodes scored (the fewest: 100, the most: 0; all equal: 100)."""
    top = int(intolerable.max()) if intolerable.size else 0
    if top == 0:
        return np.full(intolerable.shape[0], MAX_NODE_SCORE, np.int64)
    return MAX_NODE_SCORE - _div(intolerable * MAX_NODE_SCORE, np.full_like(intolerable, top))


def balanced(cpu_alloc: Ints, cpu_used: Ints, mem_alloc: Ints, mem_used: Ints, cpu: int, mem: int) -> Ints:
    def score(c: Ints, m: Ints) -> Ints:
        fc = np.minimum(c / np.maximum(cpu_alloc, 1), 1.0)
        fm = np.minimum(m / np.maximum(mem_alloc, 1), 1.0)
        std = np.abs(fc - fm) / 2
        out: Ints = ((1 - std) * MAX_NODE_SCORE).astype(np.int64)  # Go's int64(): truncation
        return out

    with_pod = score(cpu_used + cpu, mem_used + mem)
    without = score(cpu_used, mem_used)
    return MAX_NODE_SCORE // 2 + _div(MAX_NODE_SCORE // 2 + with_pod - without, np.full_like(with_pod, 2))


class DraBaselinePolicy(StatelessPolicy):
    """kube-scheduler's DRA allocator: first-fit device, LeastAllocated + BalancedAllocation node,
    random ties (a fraction below one point added to each integer score, from ``seed``)."""

    name = "dra-baseline"
    row_local = False  # the tie-break draws change from pod to pod

    def __init__(self, seed: int = 0, *, steered: bool = False) -> None:
        self.rng = np.random.default_rng([seed, 38])
        # the nodes devshare marks with its PreferNoSchedule taint (devshare.engine.steering) carry it:
        # kube-scheduler's TaintToleration scores them lower (weight 3; the pods placed here tolerate none)
        self.steered = steered

    def node_scores(self, view: FitView) -> Floats:
        state, rows, pod = view.state, view.rows, view.pod
        cpu_alloc, mem_alloc = state.cpu_total[rows], state.mem_total[rows]
        cpu_used, mem_used = state.cpu_used[rows], state.mem_used[rows]
        cpu = pod.cpu_milli or DEFAULT_MILLI_CPU
        mem = pod.memory_bytes or DEFAULT_MEMORY
        la = _div(least_allocated(cpu_alloc, cpu_used, cpu) + least_allocated(mem_alloc, mem_used, mem),
                  np.full(len(rows), 2, np.int64))
        ba = balanced(cpu_alloc, cpu_used, mem_alloc, mem_used, pod.cpu_milli, pod.memory_bytes)
        score = la + ba
        if self.steered:
            score = score + TAINT_TOLERATION_WEIGHT * taint_toleration(whole_gpu_free(state, rows).astype(np.int64))
        return np.asarray(score, np.float64) + self.rng.random(len(rows)) * 0.5

    def choose(self, view: FitView) -> Choice:
        if len(view.rows) == 0:
            return empty_choice(view)
        scores = self.node_scores(view)
        if view.request is None or view.count == 0:
            return empty_choice(view, scores)
        return Choice(scores, lowest_columns(view, view.count))
