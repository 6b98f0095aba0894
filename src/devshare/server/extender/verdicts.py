"""Filter and prioritize answers for thousands of nodes, from the engine's :meth:`Scheduler.verdicts`
(the same as :meth:`Scheduler.filter` and :meth:`Scheduler.prioritize`), with the names taken from the
candidate list's object array by index: no Python step per node."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import numpy.typing as npt

from devshare.engine.handlers.base import SUCCESS
from devshare.engine.scheduler import UNKNOWN_NODE, PodEvaluation, Scheduler
from devshare.model.request import PodRequest
from devshare.server.extender.nodeset import NodeSet
from devshare.server.extender.scores import normalize

Ints = npt.NDArray[np.int64]
log = logging.getLogger(__name__)


@dataclass
class NamedVerdicts:
    """A filter answer by node name: the nodes that passed (indexes into ``nodes.known``, their rows
    and raw scores), the failed and unresolvable ones with their reasons."""

    nodes: NodeSet
    passed_idx: Ints
    passed_rows: Ints
    raw_scores: npt.NDArray[np.float64]
    failed: dict[str, str]
    unresolvable: dict[str, str]
    evaluation: PodEvaluation
    # the engine's own reasons of every node that failed or is unknown (the texts above are their brief,
    # node-independent forms for kube-scheduler's event): what the failure metrics classify
    engine_reasons: list[str] = field(default_factory=list)

    @property
    def passed(self) -> list[str]:
        return self.nodes.names_at(self.passed_idx)

    def passed_json(self) -> bytes:
        """The JSON array of the names that passed (kube-scheduler's ``NodeNames``)."""
        return self.nodes.names_json(self.passed_idx)

    def best(self, k: int, rank: Ints) -> NamedVerdicts:
        """The same answer with only the ``k`` best nodes passed, best first: highest raw score, ties
        by the lowest ``rank`` (the state's tie-break order, by row). The others are left out of
        every list (kube-scheduler keeps what ``NodeNames`` holds; they did not fail)."""
        if self.passed_idx.size <= k:
            return self
        if k == 1 and not np.isnan(top := self.raw_scores.max()):
            # a shortlist of one: the highest score's lowest rank, no sort (a NaN score takes the sort)
            tied = np.flatnonzero(self.raw_scores == top)
            order = tied[np.argmin(rank[self.passed_rows[tied]])][None]
        else:
            order = np.lexsort((rank[self.passed_rows], -self.raw_scores))[:k]
        return NamedVerdicts(self.nodes, self.passed_idx[order], self.passed_rows[order], self.raw_scores[order],
                             self.failed, self.unresolvable, self.evaluation, self.engine_reasons)

    def without(self, held: dict[str, str]) -> NamedVerdicts:
        """The same answer with the nodes of ``held`` (name -> reason) moved from passed to failed."""
        names = self.nodes.names_at(self.passed_idx)
        keep = np.array([n not in held for n in names], np.bool_)
        if keep.all():
            return self
        moved = {n: held[n] for n in names if n in held}
        return NamedVerdicts(self.nodes, self.passed_idx[keep], self.passed_rows[keep], self.raw_scores[keep],
                             {**self.failed, **moved}, self.unresolvable, self.evaluation,
                             [*self.engine_reasons, *moved.values()])


def event_safe(text: str) -> str:
    """``text`` without ``%``: kube-scheduler writes a pod's FailedScheduling event with the reasons as
    the *format* of ``Eventf`` (v1.37 still), so ``60% compute`` would read ``60%!c(MISSING)ompute``."""
    return text.replace("%", " percent") if "%" in text else text


def _each(rewrite: Callable[[str], str], reasons: Iterable[str]) -> list[str]:
    """``rewrite`` of every reason, worked out once per distinct text (thousands of failing nodes
    share a handful of reasons)."""
    memo: dict[str, str] = {}
    out = []
    for r in reasons:
        s = memo.get(r)
        if s is None:
            s = memo[r] = rewrite(r)
        out.append(s)
    return out


def event_safe_map(reasons: dict[str, str]) -> dict[str, str]:
    return dict(zip(reasons, _each(event_safe, reasons.values()), strict=True))


def brief(reason: str, *, resolvable: bool) -> str:
    """The node-independent part of an engine reason, for kube-scheduler's event.

    kube-scheduler counts identical reasons into one line of the pod's FailedScheduling event
    ("0/1000 nodes are available: 1000 <reason>."), so a reason must not name a node's cards: the
    engine's "needs one gpu with 60% compute; gpu 0: 40% compute free, ..." becomes "needs one gpu
    with 60 percent compute: no card has that much free" (:func:`event_safe`). The per-card detail
    is logged (debug) and shown by ``devshare schedule``."""
    head, sep, _ = reason.partition("; ")
    if not sep:
        return event_safe(reason)
    return event_safe(f"{head}: no card has that much free" if resolvable else f"{head}: no card is that large")


def _briefs(reasons: list[str], *, resolvable: bool) -> list[str]:
    return _each(partial(brief, resolvable=resolvable), reasons)


def shortlisted(ev: PodEvaluation, nodes: NodeSet, k: int, rank: Ints,
                held: dict[str, str]) -> NamedVerdicts | None:
    """The best ``k`` nodes of ``nodes`` that pass in ``ev`` (the pod's evaluation over
    ``nodes.rows``; :meth:`NamedVerdicts.best`), the nodes of ``held`` left out; None when none
    passes. The failing nodes are left out of the answer without their reasons being worked out:
    kube-scheduler reads them only when no node passes (the pod's event, preemption), and then
    :func:`filter_nodes` gives them all, from the same evaluation."""
    ok = np.flatnonzero(ev.codes == SUCCESS)
    if held and ok.size:
        ok = ok[np.array([n not in held for n in nodes.names_at(ok)], np.bool_)]
    if not ok.size:
        return None
    return NamedVerdicts(nodes, ok, nodes.rows[ok], ev.scores[ok], {}, {}, ev).best(k, rank)


def filter_nodes(scheduler: Scheduler, pod: PodRequest, nodes: NodeSet, *,
                 evaluation: PodEvaluation | None = None) -> NamedVerdicts:
    """Every node of ``nodes``: those that pass, those that fail and why (the brief reasons
    kube-scheduler's event counts), and the unknown ones. ``evaluation``: the pod's evaluation over
    ``nodes.rows`` made just before (:func:`shortlisted`'s), not made again."""
    v = scheduler.verdicts(pod, nodes.rows, evaluation=evaluation)
    if v.failed_reasons and log.isEnabledFor(logging.DEBUG):
        for name, why in list(zip(nodes.names_at(v.failed), v.failed_reasons, strict=True))[:5]:
            log.debug("%s does not fit on %s: %s", pod.key, name, why)
    out = NamedVerdicts(nodes, v.passed, nodes.rows[v.passed], v.evaluation.scores[v.passed],
                        dict(zip(nodes.names_at(v.failed), _briefs(v.failed_reasons, resolvable=True), strict=True)),
                        dict.fromkeys(nodes.unknown, UNKNOWN_NODE), v.evaluation,
                        [*v.failed_reasons, *v.unresolvable_reasons, *[UNKNOWN_NODE] * len(nodes.unknown)])
    out.unresolvable.update(zip(nodes.names_at(v.unresolvable),
                                _briefs(v.unresolvable_reasons, resolvable=False), strict=True))
    return out


def score_nodes(scheduler: Scheduler, pod: PodRequest, nodes: NodeSet) -> Ints:
    """Scores 0..10 of the known nodes of ``nodes`` (in the order of ``nodes.rows``; unfit: 0)."""
    ev = scheduler.evaluate(pod, nodes.rows)
    return normalize(ev.scores, ev.codes == SUCCESS)
