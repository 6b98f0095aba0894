"""What the node policies share: the protocol they follow (what the engine hands a policy,
:class:`FitView`, and what it gets back, :class:`Choice`), the candidates' resource arrays and card
choices.

When one container asks for ``k`` devices of a type (a fraction of one card, several whole cards,
several cards with a share of each) the engine builds a :class:`FitView` over every candidate node at
once and asks the policy for a score per node and the devices it would take there. The highest score
wins; ties go to the lowest rank in ``ClusterState.rank`` (a fixed node order).

A policy may learn online: :meth:`Policy.observe` is called once for every pod that arrives, before
it is scored, and :meth:`Policy.placed` after it is placed. It never sees pods that have not arrived.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from devshare.engine.fit import FitView, Gather, pick_columns, sum_per_row
from devshare.model.request import PodRequest

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


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


MAX_SPEC_GPU = 8_000  # the paper's normalisers: the largest node's GPUs (milli) and CPU (fit.MAX_SPEC_CPU)
PAPER_MAX_SCORE = 100  # the FGD paper's policies score 0..100 (raw: the extender maps scores to its own 0..10)


def empty_choice(view: FitView, scores: Floats | None = None) -> Choice:
    m = len(view.rows)
    return Choice(scores if scores is not None else np.zeros(m, np.float64), np.zeros((m, 0), np.int64))


def best_fit_columns(view: FitView, free: Ints) -> Ints:
    """Shares: the fitting card with the least free (lowest index on ties). Whole cards: the lowest
    fitting indices."""
    req = view.request
    assert req is not None
    if req.whole or req.count > 1:
        return pick_columns(view.fits, np.zeros(view.fits.shape, np.float64), req.count)
    w = view.fits.shape[1]
    return pick_columns(view.fits, -free[:, :w].astype(np.float64), req.count)


def lowest_columns(view: FitView, k: int) -> Ints:
    return pick_columns(view.fits, np.zeros(view.fits.shape, np.float64), k)
