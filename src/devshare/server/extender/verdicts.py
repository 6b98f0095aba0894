"""Filter and prioritize answers for thousands of nodes, built from one :meth:`Scheduler.evaluate`.

Same verdicts as :meth:`Scheduler.filter` and :meth:`Scheduler.prioritize`, but the per-node work
outside the engine's arrays is kept to the nodes that need it: the names that pass are picked with
an array mask, and a reason is written only for the nodes that fail. (At 5,000 nodes the engine's
own per-node loop costs more than the evaluation itself.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

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


def _evaluate(scheduler: Scheduler, pod: PodRequest, names: Sequence[str]) -> tuple[
        PodEvaluation, list[str], list[str]]:
    """The evaluation over the known nodes of ``names``; (evaluation, their names, unknown names)."""
    row_of = scheduler.state.row_of
    rows = [row_of.get(n, -1) for n in names]
    if -1 not in rows:
        known, unknown = list(names), []
        arr = np.array(rows, dtype=np.int64)
    else:
        known = [n for n, r in zip(names, rows, strict=True) if r >= 0]
        unknown = [n for n, r in zip(names, rows, strict=True) if r < 0]
        arr = np.array([r for r in rows if r >= 0], dtype=np.int64)
    return scheduler.evaluate(pod, arr), known, unknown


def filter_nodes(scheduler: Scheduler, pod: PodRequest, names: Sequence[str]) -> Verdicts:
    ev, known, unknown = _evaluate(scheduler, pod, names)
    out = Verdicts(unresolvable=dict.fromkeys(unknown, UNKNOWN_NODE))
    codes: npt.NDArray[np.int8] = ev.codes
    ok = codes == SUCCESS
    out.passed = [known[i] for i in np.flatnonzero(ok).tolist()]
    bad = np.flatnonzero(~ok)
    if bad.size:
        hard = (codes[bad] == UNRESOLVABLE).tolist()
        for i, is_hard in zip(bad.tolist(), hard, strict=True):
            (out.unresolvable if is_hard else out.failed)[known[i]] = ev.reason(i)
    return out


def score_nodes(scheduler: Scheduler, pod: PodRequest, names: Sequence[str]) -> list[int]:
    """Scores 0..10 for ``names`` in their order (nodes that do not fit, or unknown: 0)."""
    ev, known, unknown = _evaluate(scheduler, pod, names)
    norm = normalize(ev.scores, ev.codes == SUCCESS).tolist()
    if not unknown:
        return [int(s) for s in norm]
    by_name = dict(zip(known, norm, strict=True))
    return [int(by_name.get(n, 0)) for n in names]
