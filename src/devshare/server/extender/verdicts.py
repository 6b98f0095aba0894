"""Filter and prioritize answers for thousands of nodes, from the engine's :meth:`Scheduler.verdicts`
(the same as :meth:`Scheduler.filter` and :meth:`Scheduler.prioritize`), with the names taken from the
candidate list's object array by index: no Python step per node."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from devshare.engine.handlers.base import SUCCESS
from devshare.engine.scheduler import UNKNOWN_NODE, PodEvaluation, Scheduler, normalize
from devshare.model.request import PodRequest
from devshare.server.extender.nodeset import NodeSet

Ints = npt.NDArray[np.int64]


@dataclass
class NamedVerdicts:
    """A filter answer by node name (and the rows and raw scores of the nodes that passed)."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    passed_rows: Ints = field(default_factory=lambda: np.zeros(0, np.int64))
    raw_scores: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0, np.float64))
    evaluation: PodEvaluation | None = None


def filter_nodes(scheduler: Scheduler, pod: PodRequest, nodes: NodeSet) -> NamedVerdicts:
    v = scheduler.verdicts(pod, nodes.rows)
    names = nodes.known
    out = NamedVerdicts(passed=names[v.passed].tolist(), passed_rows=nodes.rows[v.passed], evaluation=v.evaluation,
                   raw_scores=v.evaluation.scores[v.passed],
                   failed=dict(zip(names[v.failed].tolist(), v.failed_reasons, strict=True)),
                   unresolvable=dict.fromkeys(nodes.unknown, UNKNOWN_NODE))
    out.unresolvable.update(zip(names[v.unresolvable].tolist(), v.unresolvable_reasons, strict=True))
    return out


def scores_from(raw: npt.NDArray[np.float64]) -> Ints:
    """Scores 0..10 from the raw scores of nodes that all fit."""
    return normalize(raw, np.ones(raw.shape, np.bool_))


def score_nodes(scheduler: Scheduler, pod: PodRequest, nodes: NodeSet) -> Ints:
    """Scores 0..10 of the known nodes of ``nodes`` (in the order of ``nodes.rows``; unfit: 0)."""
    ev = scheduler.evaluate(pod, nodes.rows)
    return normalize(ev.scores, ev.codes == SUCCESS)
