"""What the node policies share: per-candidate resource arrays and card choices."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from devshare.engine.fit import is_range, pick_columns
from devshare.engine.policies.protocol import Choice, FitView
from devshare.engine.state import ClusterState
from devshare.model import names
from devshare.model.request import PodRequest

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

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
