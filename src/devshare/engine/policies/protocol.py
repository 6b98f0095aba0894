"""The node policy protocol: what the engine hands a policy (:class:`FitView`) and what it gets back
(:class:`Choice`), for the common request shape.

When one container asks for ``k`` devices of a type (a fraction of one card, several whole cards,
several cards with a share of each) the engine builds a :class:`FitView` over every candidate node at
once and asks the policy for a score per node and the devices it would take there. The highest score
wins; ties go to the lowest rank in ``ClusterState.rank`` (a fixed node order).

A policy may learn online: :meth:`Policy.observe` is called once for every pod that arrives, before
it is scored, and :meth:`Policy.placed` after it is placed. It never sees pods that have not arrived.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from devshare.engine.fit import Gather
from devshare.engine.rowwise import sum_per_row
from devshare.engine.state import ClusterState
from devshare.engine.table import DeviceTable
from devshare.model.request import DeviceRequest, PodRequest

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class FitView:
    """What a policy sees: candidate nodes that fit, and per device whether one share fits."""

    state: ClusterState
    pod: PodRequest
    rows: Ints  # candidate node rows; every one can hold the pod
    table: DeviceTable | None  # the device type's table (None for a pod asking no device)
    request: DeviceRequest | None  # per-device ask (None for a pod asking no device)
    fits: Mask  # [len(rows), width]: one share fits on that device (all False width when no device)
    # the device arrays of `rows` (free_core, free_mem, total_core, total_mem, used_slots, usable),
    # gathered once and shared; built from `table` when not given
    gather: Gather | None = field(default=None)

    def arrays(self) -> Gather:
        if self.gather is not None:
            return self.gather
        if self.table is None:
            raise ValueError("this pod asks for no device: there are no device arrays")
        g = Gather(self.table, self.rows)
        object.__setattr__(self, "gather", g)
        return g

    @property
    def count(self) -> int:
        return self.request.count if self.request is not None else 0


@dataclass(frozen=True)
class Choice:
    scores: Floats  # one per candidate row, higher is better
    columns: Ints  # [len(rows), count]: the devices taken on each candidate row


class Policy(Protocol):
    """A node policy. Optional attributes the engine reads:

    - ``row_local: bool`` — a node's score and devices depend only on that node's state, the pod and
      the policy's model (not on which other nodes are candidates). The engine then reuses a node's
      answer for the next pod of the same shape until that node changes (one node changes per bind).
    - ``model_version: int`` — bumped whenever what the policy learned changes its answers.
    - ``cache_key(pod, request) -> Hashable | None`` — what of the pod and of its own model a
      row-local policy's answer on one node reads; pods with equal keys share answers. Without it a
      row-local policy's answers are keyed by the whole pod shape and ``model_version`` (safe, fewer
      hits); see :mod:`devshare.engine.caches`.
    """

    name: str

    def observe(self, pod: PodRequest) -> None:
        """A pod arrived (called before it is scored)."""

    def placed(self, pod: PodRequest, row: int) -> None:
        """A pod was placed on ``row`` (called after its usage is in the state)."""

    def choose(self, view: FitView) -> Choice:
        """Score every candidate row of ``view`` and pick the devices on each."""
        ...


def node_utilization(g: Gather, extra: float) -> Floats:
    """Share of each node's device compute in use once ``extra`` thousandths more are placed."""
    total = sum_per_row(g.total_core)
    used = total - sum_per_row(g.free_core) + extra
    return np.asarray(np.where(total > 0, used / np.maximum(total, 1), 0.0), dtype=np.float64)


class StatelessPolicy:
    """Base for policies that learn nothing from the pods they see."""

    def observe(self, pod: PodRequest) -> None:
        return None

    def placed(self, pod: PodRequest, row: int) -> None:
        return None
