"""Filter and prioritize answers for thousands of nodes, built from one :meth:`Scheduler.evaluate`.

Same verdicts as :meth:`Scheduler.filter` and :meth:`Scheduler.prioritize`, but the per-node work
outside the engine's arrays is kept to the nodes that need it: the names that pass are picked with
an array mask, and a reason is written only for the nodes that fail. (At 5,000 nodes the engine's
own per-node loop costs more than the evaluation itself.)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from devshare.engine.handlers import Code
from devshare.engine.scheduler import UNKNOWN_NODE, Scheduler, normalize
from devshare.model.request import PodRequest
from devshare.server.extender.nodeset import NodeSet

SUCCESS = int(Code.SUCCESS)  # plain ints: compared per array, not looked up per node
UNRESOLVABLE = int(Code.UNRESOLVABLE)
Ints = npt.NDArray[np.int64]


@dataclass
class Verdicts:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    passed_rows: Ints = field(default_factory=lambda: np.zeros(0, np.int64))
    raw_scores: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0, np.float64))


def filter_nodes(scheduler: Scheduler, pod: PodRequest, nodes: NodeSet) -> Verdicts:
    ev = scheduler.evaluate(pod, nodes.rows)
    out = Verdicts(unresolvable=dict.fromkeys(nodes.unknown, UNKNOWN_NODE))
    codes: npt.NDArray[np.int8] = ev.codes
    ok = codes == SUCCESS
    out.passed = nodes.known[ok].tolist()
    out.passed_rows = nodes.rows[ok]
    out.raw_scores = ev.scores[ok]
    bad = np.flatnonzero(~ok)
    if bad.size:
        hard = (codes[bad] == UNRESOLVABLE).tolist()
        for i, name, is_hard in zip(bad.tolist(), nodes.known[bad].tolist(), hard, strict=True):
            (out.unresolvable if is_hard else out.failed)[name] = ev.reason(i)
    return out


def scores_from(raw: npt.NDArray[np.float64]) -> Ints:
    """Scores 0..10 from the raw scores of nodes that all fit."""
    return normalize(raw, np.ones(raw.shape, np.bool_))


def score_nodes(scheduler: Scheduler, pod: PodRequest, nodes: NodeSet) -> Ints:
    """Scores 0..10 of the known nodes of ``nodes`` (in the order of ``nodes.rows``; unfit: 0)."""
    ev = scheduler.evaluate(pod, nodes.rows)
    return normalize(ev.scores, ev.codes == SUCCESS)
