"""Filter and prioritize answers for thousands of nodes, built from one :meth:`Scheduler.evaluate`.

Same verdicts as :meth:`Scheduler.filter` and :meth:`Scheduler.prioritize`, but the per-node work
outside the engine's arrays is kept to the nodes that need it: the names that pass are picked with
an array mask, and a reason is written only for the nodes that fail. (At 5,000 nodes the engine's
own per-node loop costs more than the evaluation itself.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from devshare.engine.scheduler import PodEvaluation, Scheduler, normalize
from devshare.model.request import PodRequest

SUCCESS = 0
UNRESOLVABLE = 3  # engine.handlers.Code.UNRESOLVABLE
UNKNOWN_NODE = "node is not known to devshare (no such Node, or no Device object yet)"


@dataclass
class Verdicts:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    raw_scores: npt.NDArray[np.float64] | None = None  # the policy's raw score of each passed node


def rows_of(scheduler: Scheduler, names: Sequence[str]) -> tuple[npt.NDArray[np.int64], list[str], list[str]]:
    """Rows of the known nodes of ``names``, their names, and the unknown names."""
    row_of = scheduler.state.row_of
    if not names:
        return np.zeros(0, np.int64), [], []
    try:
        rows = itemgetter(*names)(row_of)  # one C call when every name is known (the usual case)
        if len(names) == 1:
            rows = (rows,)
        return np.array(rows, dtype=np.int64), list(names), []
    except KeyError:
        known = [n for n in names if n in row_of]
        unknown = [n for n in names if n not in row_of]
        return np.array([row_of[n] for n in known], dtype=np.int64), known, unknown


def _evaluate(scheduler: Scheduler, pod: PodRequest, names: Sequence[str]) -> tuple[
        PodEvaluation, list[str], list[str]]:
    """The evaluation over the known nodes of ``names``; (evaluation, their names, unknown names)."""
    rows, known, unknown = rows_of(scheduler, names)
    return scheduler.evaluate(pod, rows), known, unknown


def filter_nodes(scheduler: Scheduler, pod: PodRequest, names: Sequence[str]) -> Verdicts:
    ev, known, unknown = _evaluate(scheduler, pod, names)
    out = Verdicts(unresolvable=dict.fromkeys(unknown, UNKNOWN_NODE))
    codes: npt.NDArray[np.int8] = ev.codes
    ok = codes == SUCCESS
    good = np.flatnonzero(ok).tolist()
    out.passed = [known[i] for i in good]
    out.raw_scores = ev.scores[good]
    bad = np.flatnonzero(~ok)
    if bad.size:
        hard = (codes[bad] == UNRESOLVABLE).tolist()
        for i, is_hard in zip(bad.tolist(), hard, strict=True):
            (out.unresolvable if is_hard else out.failed)[known[i]] = ev.reason(i)
    return out


def scores_from(raw: npt.NDArray[np.float64]) -> list[int]:
    """Scores 0..10 from the raw scores of nodes that all fit."""
    return [int(x) for x in normalize(raw, np.ones(raw.shape, np.bool_)).tolist()]


def score_nodes(scheduler: Scheduler, pod: PodRequest, names: Sequence[str]) -> list[int]:
    """Scores 0..10 for ``names`` in their order (nodes that do not fit, or unknown: 0)."""
    ev, known, unknown = _evaluate(scheduler, pod, names)
    norm = normalize(ev.scores, ev.codes == SUCCESS).tolist()
    if not unknown:
        return [int(s) for s in norm]
    by_name = dict(zip(known, norm, strict=True))
    return [int(by_name.get(n, 0)) for n in names]
