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

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from devshare.engine.fit import Gather, is_range, pick_columns, sum_per_row
from devshare.engine.state import ClusterState
from devshare.engine.table import DeviceTable
from devshare.model import names
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


MAX_SPEC_CPU = 128_000  # the paper's normalisers: the largest node's CPU (milli) and GPUs (milli)
MAX_SPEC_GPU = 8_000
PAPER_MAX_SCORE = 100  # the FGD paper's policies score 0..100 (raw: the extender maps scores to its own 0..10)


def gpu_free(state: ClusterState, rows: Ints) -> Ints:
    """``[M, W]`` free milli-GPU per usable card (0 on absent, unhealthy or held cards)."""
    t = state.tables.get(names.GPU)
    if t is None:
        return np.zeros((rows.shape[0], 1), np.int64)
    n = len(rows)
    if n and is_range(rows):  # every node in order: a view, no gather
        view = t.open_core[:n]
        view.flags.writeable = False  # the table's own array: read, never written through
        return view
    return t.open_core[rows]


def cpu_left(state: ClusterState, rows: Ints) -> Ints:
    """CPU left per row; nodes that do not track CPU count as having plenty."""
    total = state.cpu_total[rows]
    return np.where(total > 0, total - state.cpu_used[rows], MAX_SPEC_CPU * 1000)


def mem_left(state: ClusterState, rows: Ints) -> Ints:
    """Memory (bytes) left per row; nodes that do not track memory count as having plenty."""
    total = state.mem_total[rows]
    return np.where(total > 0, total - state.mem_used[rows], UNTRACKED_MEMORY)


UNTRACKED_MEMORY = 1 << 60  # bytes: more than any node has


def pod_gpu(pod: PodRequest) -> tuple[int, int]:
    """(GPU count, per-GPU milli) of the pod's first GPU ask; (0, 0) for none."""
    for c in pod.containers:
        for d in c.devices:
            if d.type == names.GPU:
                return d.count, d.core_milli
    return 0, 0


def class_key(pod: PodRequest) -> tuple[int, int, int, tuple[str, ...]]:
    count, milli = pod_gpu(pod)
    return (pod.cpu_milli, milli if count else 0, count, tuple(sorted(pod.gpu_models)))


class NodeModels:
    """The GPU model of every row as a small integer code into ``names``, made once per layout of the
    cluster (nodes and devices) and shared by every policy on the state."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def codes(self, state: ClusterState, rows: Ints) -> Ints:
        self.names, codes = state.caches.per_layout("gpu model codes", lambda: model_codes(state))
        return codes[rows]


def model_codes(state: ClusterState) -> tuple[list[str], Ints]:
    """The distinct GPU models (in row order of first use) and each row's index into them."""
    names_: dict[str, int] = {}
    codes = np.zeros(max(state.n_rows, 1), np.int64)
    for row in state.row_of.values():
        codes[row] = names_.setdefault(state.gpu_model(row), len(names_))
    return list(names_), codes


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
