"""Filter and prioritize: which candidate nodes a pod fits, and how well, with the holds a filter leaves.

Answers follow kube-scheduler's rules: a node that could fit once other pods leave (devices in use) is a
``FailedNodes`` entry (preemption may help); one that can never fit as things are (no such devices,
unhealthy, cordoned, unknown node, invalid request) is in ``FailedAndUnresolvableNodes``. Logical
failures are answered with HTTP 200 and ``Error`` (how kube-scheduler reads them).

With a shortlist (``scheduling.shortlist``, :mod:`~devshare.server.extender.shortlist`) a filter passes
only the best K nodes of a pod without soft wishes, and works out why the others fail only when none
passes. With a shortlist of one, the one node passed is *held* for the pod (a ``filter`` hold of the
lifecycle) until its bind comes: kube-scheduler filters the next pods while the bind is on its way, and
without the hold the next pod could be told the same free card. Only a pod read from the watch is held
(a filter body is never trusted with devices); a new filter of the pod drops its hold, the expiry drops a
hold whose bind never came (``FILTER_HOLD_TTL``).

A filter's results are remembered a moment (:class:`Remembered`): prioritize reuses its scores, and bind
its evaluation of an unchanged node. Pods of a group go through the engine's group planner
(:mod:`devshare.server.extender.groups`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import numpy as np
import numpy.typing as npt

from devshare.engine.caches import LRU
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.records import Conflict
from devshare.engine.scheduler import UNKNOWN_NODE, PodEvaluation
from devshare.model.errors import InvalidInput
from devshare.model.request import PodRequest
from devshare.server.extender.groups import Groups
from devshare.server.extender.metrics import ExtenderMetrics
from devshare.server.extender.nodeset import PriorityEncoder, encode_priorities
from devshare.server.extender.preemption import Preemption
from devshare.server.extender.refused import RefusalLog, summarize
from devshare.server.extender.requests import Candidates, PodId, Requests, decode_pod_id, invalid_request
from devshare.server.extender.requeue import Requeue
from devshare.server.extender.scores import PLANNED_SCORE, scores_from
from devshare.server.extender.verdicts import (
    NamedVerdicts,
    event_safe,
    event_safe_map,
    filter_nodes,
    score_nodes,
    shortlisted,
)
from devshare.server.extender.view import ClusterView
from devshare.server.extender.wire import ExtenderArgs, ExtenderFilterResult, is_null

log = logging.getLogger(__name__)

SCORE_REUSE_SECONDS = 2.0  # prioritize reuses the scores of a filter this recent for the same pod
FILTERS_KEPT = 8  # filter results kept for prioritize and bind (each holds arrays over its candidates)
FILTER_HOLD_TTL = 30.0  # seconds a shortlist of one's node stays held for the pod until its bind comes
JSON_WHITESPACE = b" \t\r\n"
Ints = npt.NDArray[np.int64]


@dataclass
class Remembered:
    """What a filter computed for prioritize and bind to reuse."""

    pod_id: PodId
    at: float
    encoded: bytes  # the JSON of the names that passed, as kube-scheduler sends it back
    rows: Ints  # their rows
    raw: npt.NDArray[np.float64]  # and raw scores
    evaluation: PodEvaluation | None  # for the bind: its answer on a node that has not changed since
    layout: int  # the state's layout then (node indexes mean the same nodes while it stays)
    position: Ints | None = None  # state row -> index in ``rows`` (-1: did not pass)


NOT_READY = "not ready: state not synced"


class NotReady(Exception):
    """The state is not synced yet: the verb cannot be answered (prioritize gets a 503)."""


class Filtering:
    """kube-scheduler's ``/filter`` and ``/prioritize``: before the informer's first list is in, filter
    answers ``not ready`` and prioritize raises :class:`NotReady`; a filter that passes no node goes
    into the record of refusals (``refused``, what ``/ui``'s queue shows)."""

    def __init__(self, lifecycle: Lifecycle, cluster: ClusterView, requests: Requests, groups: Groups,
                 preemption: Preemption, requeue: Requeue, metrics: ExtenderMetrics, refused: RefusalLog, *,
                 shortlist: int, clock: Callable[[], float]) -> None:
        self.lifecycle = lifecycle
        self.cluster = cluster
        self.refused = refused
        self.scheduler = lifecycle.scheduler
        self.state = lifecycle.state
        self.requests = requests
        self.groups = groups
        self.preemption = preemption
        self.requeue = requeue
        self.metrics = metrics
        self.shortlist = shortlist  # the configuration's scheduling.shortlist (0: every node that fits)
        self.clock = clock
        self.priorities = PriorityEncoder(self.state)
        # the last filters' results by pod key (kube-scheduler binds in the background: the next pods'
        # filters may come before a pod's bind)
        self.filtered: LRU[str, Remembered] = LRU(FILTERS_KEPT)

    # ------------------------------------------------------------------ filter
    async def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        if not self.cluster.synced:
            self.requests.candidates(args)  # a malformed body is still a 400
            return ExtenderFilterResult(error=NOT_READY)
        answer = await self._filter(args)
        if answer.error or answer.failed_nodes or answer.failed_and_unresolvable_nodes:
            self._note_refused(args, answer)
        return answer

    async def _filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        """The pod and its candidates read, the lifecycle told, the window evaluated once, the answer."""
        cands, asked = self.requests.read(args)
        if isinstance(asked, InvalidInput):
            reason = invalid_request(asked)
            self.metrics.fail("filter", [reason])
            return _answer(cands, [], {}, dict.fromkeys(cands.names, reason))
        pod, pod_id, soft_wishes = asked
        # a pod asking for no device is placed like any other (the node's CPU and memory, the policy's
        # score): kube-scheduler asks about every pod of devshare's profile (deploy/scheduler's config)
        if pod.group is not None:
            await self.groups.look_up(pod)  # a member the watch does not know yet is read first
            self.lifecycle.arrived(pod)  # the policy learns of each pod once, at its first filter
            return self._filter_member(pod, pod_id, self.requests.candidates(args))  # as they are now
        # the policy learns of the pod (once), its earlier filter's hold goes, the nominated nodes are not for it
        held = self.lifecycle.filter_begins(pod, self.clock())
        short = self.shortlist and not soft_wishes  # kube-scheduler's scores weigh nothing it asked
        ev = self.scheduler.evaluate(pod, cands.nodes.rows)  # the window, evaluated once
        # with a shortlist the answer is the few nodes that pass, not the thousand that fail: the failing
        # nodes' reasons are worked out only when no node passes (kube-scheduler reads them only then)
        out = shortlisted(ev, cands.nodes, self.shortlist, self.state.rank, held) if short else None
        if out is not None:
            self.requeue.forget(pod.key)
            if cands.nodes.unknown:
                self.metrics.fail("filter", [UNKNOWN_NODE] * len(cands.nodes.unknown))
            self._after_answer(pod, pod_id, out)
        else:
            out = filter_nodes(self.scheduler, pod, cands.nodes, evaluation=ev)
            if held:
                out = out.without(held)
            if not out.passed_idx.size and out.failed:
                self.preemption.maybe_preempt(pod, list(out.failed))
                self.requeue.refused_pod(pod.key, pod_id[1])  # devices in use: nudged when some free up
            elif out.passed_idx.size:
                self.requeue.forget(pod.key)
            if short:
                out = out.best(self.shortlist, self.state.rank)
            if out.engine_reasons:
                self.metrics.fail("filter", out.engine_reasons)
        names_json = out.passed_json()  # compact JSON: what any client sends back to prioritize
        self._remember(Remembered(pod_id, self.clock(), names_json, out.passed_rows, out.raw_scores,
                                  out.evaluation, self.state.layout))
        failed, unresolvable = out.failed, out.unresolvable
        if short and out.passed_idx.size:
            failed, unresolvable = {}, {}
        if cands.node_list is None:
            return ExtenderFilterResult(node_names=msgspec.Raw(names_json), failed_nodes=failed,
                                        failed_and_unresolvable_nodes=unresolvable)
        return _answer(cands, out.passed, failed, unresolvable)

    def _filter_member(self, pod: PodRequest, pod_id: PodId, cands: Candidates) -> ExtenderFilterResult:
        self.filtered.pop(pod_id[0], None)
        missing = self.groups.missing(pod)
        if missing is not None:
            self.metrics.fail("filter", [missing])
            return _answer(cands, [], dict.fromkeys(cands.names, event_safe(missing)), {})
        nodes = cands.nodes
        outcome = self.groups.planner.filter(pod, nodes.known.tolist(), now=self.clock())
        outcome.unresolvable.update(dict.fromkeys(nodes.unknown, UNKNOWN_NODE))
        if outcome.failed or outcome.unresolvable:
            self.metrics.fail("filter", [*outcome.failed.values(), *outcome.unresolvable.values()])
        return _answer(cands, outcome.passed, event_safe_map(outcome.failed), event_safe_map(outcome.unresolvable))

    def _after_answer(self, pod: PodRequest, pod_id: PodId, out: NamedVerdicts) -> None:
        """Hold the shortlisted node right after the answer is sent (:meth:`_hold`), while kube-scheduler
        works on its next pod: the callback runs in the event loop's next round, before any request read
        after it (the next filter, this pod's bind). (Evaluating the nodes changed since here as well was
        measured and not kept: BENCHMARKS.md, issue 11's seventh stop.)"""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # called outside the server (a test, a tool): at once
            self._settle(pod, pod_id, out)
            return
        loop.call_soon(self._settle, pod, pod_id, out)

    def _settle(self, pod: PodRequest, pod_id: PodId, out: NamedVerdicts) -> None:
        try:
            self._hold(pod, pod_id, out)
        except Exception:  # never let bookkeeping after an answer take the loop down
            log.exception("after the filter of %s", pod.key)

    def _hold(self, pod: PodRequest, pod_id: PodId, out: NamedVerdicts) -> None:
        """Hold the devices of the one node a shortlist of one passes, until the pod's bind comes."""
        if self.shortlist != 1 or out.passed_idx.size != 1 or self.requests.watched_version(pod_id) is None:
            return
        if pod.key in self.state.pods:
            return  # a bind of it in flight holds devices already
        alloc = out.evaluation.allocation(self.state, int(out.passed_idx[0]))
        try:
            self.lifecycle.assume(pod, alloc, now=self.clock(), hold="filter", ttl=FILTER_HOLD_TTL)
        except Conflict as e:  # the evaluation just said it fits: a bug, but the bind decides again
            log.warning("holding %s on %s after its filter failed: %s", pod.key, alloc.node, e)

    def _remember(self, r: Remembered) -> None:
        self.filtered.put(r.pod_id[0], r)

    def _note_refused(self, args: ExtenderArgs, answer: ExtenderFilterResult) -> None:
        """A filter that passed no node goes into the record of refusals, with its reasons counted."""
        passed = answer.node_names if answer.nodes is None else answer.nodes.get("items")
        if isinstance(passed, msgspec.Raw):
            passed = None if bytes(passed).strip() in (b"[]", b"null") else [passed]
        if passed:
            return
        named = decode_pod_id(bytes(args.pod)) if not is_null(args.pod) else None
        if named is None:
            return
        reason, nodes = summarize([*answer.failed_nodes.values(), *answer.failed_and_unresolvable_nodes.values()])
        self.refused.refused(named[0], "filter", answer.error or reason, nodes)

    # ------------------------------------------------------------------ prioritize
    async def prioritize(self, args: ExtenderArgs) -> bytes:
        """The HostPriorityList, encoded (JSON bytes)."""
        if not self.cluster.synced:
            self.requests.candidates(args)  # a malformed body is still a 400
            raise NotReady(NOT_READY)
        try:
            pod, pod_id, _ = self.requests.request_of(bytes(args.pod))
        except InvalidInput:
            names = self.requests.candidates(args).names
            return encode_priorities(names, [0] * len(names))
        if pod.group is not None:
            await self.groups.look_up(pod)  # a member the watch does not know yet is read first
        recalled = self._recalled_scores(pod_id, args) if pod.group is None else None
        if recalled is not None:
            return self.priorities.encode(*recalled)
        cands = self.requests.candidates(args)
        names = cands.names
        if pod.group is not None:
            if self.groups.missing(pod) is not None:
                return encode_priorities(names, [0] * len(names))
            planned = self.groups.planner.planned_node(pod, cands.nodes.known.tolist(), now=self.clock())
            return encode_priorities(names, [PLANNED_SCORE if n == planned else 0 for n in names])
        scores = score_nodes(self.scheduler, pod, cands.nodes)
        if not cands.nodes.unknown:
            return self.priorities.encode(cands.nodes.rows, scores)
        by_name = dict(zip(cands.nodes.known.tolist(), scores.tolist(), strict=True))
        return encode_priorities(names, [by_name.get(n, 0) for n in names])

    def _recalled_scores(self, pod_id: PodId, args: ExtenderArgs) -> tuple[Ints, Ints] | None:
        """The scores of the filter just made for this pod, when prioritize asks about the nodes that
        passed it, or some of them: scores as of the filter's moment, 0..10 over the nodes asked."""
        r = self.filtered.get(pod_id[0])
        if r is None or r.pod_id != pod_id or not pod_id[1] or self.clock() - r.at > SCORE_REUSE_SECONDS:
            return None
        if is_null(args.node_names) or r.layout != self.state.layout:
            return None
        raw = bytes(args.node_names)
        if raw.translate(None, JSON_WHITESPACE) == r.encoded:  # names hold no whitespace
            return r.rows, scores_from(r.raw)
        nodes = self.requests.nodesets.get(raw)
        if nodes.unknown:
            return None
        if r.position is None:
            r.position = np.full(max(self.state.n_rows, 1), -1, np.int64)
            r.position[r.rows] = np.arange(len(r.rows))
        at = r.position[nodes.rows]
        if (at < 0).any():
            return None  # a node the filter did not pass: evaluate afresh
        return nodes.rows, scores_from(r.raw[at])


def _answer(cands: Candidates, passed: list[str], failed: dict[str, str],
            unresolvable: dict[str, str]) -> ExtenderFilterResult:
    if cands.node_list is None:
        return ExtenderFilterResult(node_names=passed, failed_nodes=failed, failed_and_unresolvable_nodes=unresolvable)
    keep = set(passed)
    items = [n for n, name in zip(cands.items or [], cands.names, strict=True) if name in keep]
    return ExtenderFilterResult(nodes={**cands.node_list, "items": items}, failed_nodes=failed,
                                failed_and_unresolvable_nodes=unresolvable)
