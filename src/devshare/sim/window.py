"""kube-scheduler's node window (``percentageOfNodesToScore``), modelled for the replay.

With an extender, kube-scheduler does not send the extender every node. For each pod it walks its
node list from a rotating start index (``nextStartNodeIndex``) and stops once it has found
``numFeasibleNodesToFind`` nodes that pass its own filters (CPU, memory, ...; GPUs are
its resource fit ignores them); the start index then advances by the nodes it
processed (the feasible ones found and the infeasible ones seen), modulo the node count. The
extender (devshare's engine) chooses among those candidates only; when none fits the pod's devices
the cycle fails and kube-scheduler retries the pod later, from where the index now is.

:class:`Window` is that walk: the node list is the seed's node order (the replay's ``state.rank``),
the filter is the simulator's CPU and memory check (the engine's own, on the node's tracked
totals) and a cordoned node is infeasible. :func:`schedule` places one pod the way the extender
would under it: the engine (:meth:`Scheduler.place`) chooses among each window's candidates, and a
pod that fits none of them is retried with the next window at once, until every node has been
walked once for it; only then does it count as fitting nowhere. So a pod that fits some node is
always placed (the windows of one pod follow each other and the state does not change between
them); the window only changes *which* node it gets. The engine stays as it is: this is the
simulator's model of kube-scheduler, not part of the extender.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Placement
from devshare.engine.state import ClusterState
from devshare.model.request import PodRequest

Ints = npt.NDArray[np.int64]

# pkg/scheduler/schedule_one.go
MIN_FEASIBLE_NODES_TO_FIND = 100  # minFeasibleNodesToFind
MIN_FEASIBLE_NODES_PERCENTAGE = 5  # minFeasibleNodesPercentageToFind
BASE_PERCENTAGE = 50  # the adaptive percentage is 50 - nodes/125, at least 5
ADAPTIVE = 0  # percentageOfNodesToScore unset (or 0): kube-scheduler's adaptive default


def nodes_to_find(n_nodes: int, percentage: int = ADAPTIVE) -> int:
    """kube-scheduler's ``numFeasibleNodesToFind``: every node under 100 nodes; else ``n * p / 100``
    (integer arithmetic, as in Go) and at least 100, where ``p`` is ``percentage`` or, when it is 0,
    the adaptive ``max(5, 50 - n / 125)``."""
    if not 0 <= percentage <= 100:
        raise ValueError(f"percentageOfNodesToScore must be between 0 and 100, got {percentage}")
    if n_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return n_nodes
    p = percentage
    if p == ADAPTIVE:
        p = max(BASE_PERCENTAGE - n_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE)
    return max(n_nodes * p // 100, MIN_FEASIBLE_NODES_TO_FIND)


class Window:
    """kube-scheduler's rotating walk over a fixed node order (the rows of ``state``, lowest
    ``state.rank`` first), finding ``nodes_to_find(n, percentage)`` CPU/memory-feasible nodes a cycle.

    Counters for the report: ``cycles`` (windows tried), ``pods`` (pods walked for), ``later``
    (pods placed from a window after their first), ``walked`` (nodes processed in all)."""

    def __init__(self, state: ClusterState, percentage: int = ADAPTIVE) -> None:
        self.state = state
        rows = state.node_rows()
        self.order: Ints = rows[np.argsort(state.rank[rows], kind="stable")]
        self.n = int(self.order.size)
        self.percentage = percentage
        self.k = nodes_to_find(self.n, percentage)
        self.start = 0  # nextStartNodeIndex
        self.cycles = self.pods = self.later = self.walked = 0

    def feasible(self, pod: PodRequest) -> npt.NDArray[np.bool_]:
        """Per position of the walk order: the node passes kube-scheduler's own filters for ``pod``
        (schedulable, and the CPU and memory the pod asks fit; an untracked total, 0, always fits),
        as the engine checks them."""
        s, rows = self.state, self.order
        ok = s.active[rows].copy()
        if pod.cpu_milli:
            ok &= ~s.cpu_short(rows, pod.cpu_milli)
        if pod.memory_bytes:
            ok &= ~s.memory_short(rows, pod.memory_bytes)
        return ok

    def cycle(self, fit2: npt.NDArray[np.bool_], cum2: Ints) -> tuple[Ints, int]:
        """One scheduling cycle from the current start: the rows found (in walk order) and the nodes
        processed, by which the start advances. ``fit2``/``cum2``: the feasibility over the order written
        twice and its running count (so a walk that wraps around is one slice)."""
        n, s = self.n, self.start
        before = int(cum2[s - 1]) if s else 0
        end = int(np.searchsorted(cum2, before + self.k, side="left"))  # position of the k-th feasible
        processed = min(end - s + 1, n)  # all n when fewer than k nodes are feasible
        picked = s + np.flatnonzero(fit2[s:s + processed])
        self.start = (s + processed) % n
        self.cycles += 1
        self.walked += processed
        return self.order[picked % n], processed

    def walk(self, pod: PodRequest) -> Iterator[Ints]:
        """Yield the candidate rows of each cycle for ``pod`` until every node has been walked once;
        the start index advances as each window is taken (stop iterating once the pod is placed)."""
        if self.n == 0:
            return
        self.pods += 1
        fit = self.feasible(pod)
        fit2 = np.concatenate((fit, fit))
        cum2 = np.cumsum(fit2, dtype=np.int64)
        walked = 0
        while walked < self.n:
            rows, processed = self.cycle(fit2, cum2)
            walked += processed
            yield rows


def schedule(lifecycle: Lifecycle, window: Window, pod: PodRequest, *, now: float = 0.0) -> Placement | None:
    """:meth:`Lifecycle.schedule` under kube-scheduler's window: the pod arrives once, the engine
    chooses among each window's candidates in turn (the first window where it fits wins), and the
    choice is assumed and confirmed. None when no window fits it (then no node does)."""
    lifecycle.arrived(pod)
    name_of = lifecycle.state.name_of
    for k, rows in enumerate(window.walk(pod)):
        if rows.size == 0:
            continue  # kube-scheduler found no feasible node: the extender is not asked
        placed = lifecycle.schedule(pod, now=now, arrives=False, nodes=[name_of[int(r)] for r in rows.tolist()])
        if placed is not None:
            window.later += k > 0
            return placed
    return None
