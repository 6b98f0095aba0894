"""The extender's verbs over the engine: filter, prioritize, bind, preempt.

Every engine call is synchronous and made on the event loop's thread, so two requests never
interleave inside the engine. Bind is the only verb that awaits (the API server): it picks the
devices and *reserves* them in one synchronous step, so a concurrent bind of another pod already
sees them taken; then it writes the annotations and creates the Binding, and undoes the
reservation if either fails. A reservation whose bind never completes (the process stalled, the
API server hung) expires after ``assume_ttl`` seconds (:meth:`Extender.expire`, called
periodically). Assuming, confirming, forgetting and expiring are the engine's
:class:`~devshare.engine.lifecycle.Lifecycle`, which ``devshare schedule`` uses too.

Answers follow kube-scheduler's rules: a node that could fit once other pods leave (devices in
use) is a ``FailedNodes`` entry (preemption may help); one that can never fit as things are
(no such devices, unhealthy, cordoned, unknown node, invalid request) is in
``FailedAndUnresolvableNodes``. Logical failures are answered with HTTP 200 and ``Error`` (that is
how kube-scheduler reads them); only a body that is not the protocol's type gets a 400.

Pods of a group or gang go through the engine's :class:`GroupPlanner` (one per extender, on the
same state): filter passes the member's planned node, prioritize scores it 10 (``PLANNED_SCORE``), bind claims the
planned devices; at a gang's quorum the extender binds every waiting member itself (:mod:`members`,
docs/extender.md). The API writes of a bind are in :mod:`writes`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from devshare.config import refuse_disabled
from devshare.engine.groups import GroupPlanner
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import UNKNOWN_NODE, PodEvaluation, Scheduler
from devshare.engine.state import DEFAULT_ASSUME_TTL, ClusterState, Conflict
from devshare.kube.backend import Backend, meta, object_key
from devshare.kube.errors import BackendError
from devshare.model.allocation import PodAllocation
from devshare.model.annotations import encode_annotations
from devshare.model.errors import InvalidInput
from devshare.model.pod import parse_pod
from devshare.model.request import PodRequest
from devshare.server.extender import preempt as _preempt
from devshare.server.extender.cache import ByteLRU
from devshare.server.extender.members import MemberBinds
from devshare.server.extender.metrics import ERROR, OK, ExtenderMetrics
from devshare.server.extender.nodeset import (
    NodeSet,
    NodeSets,
    PriorityEncoder,
    encode_priorities,
    resolve,
)
from devshare.server.extender.preemption import Preemptor
from devshare.server.extender.requeue import Requeue
from devshare.server.extender.scores import PLANNED_SCORE, scores_from
from devshare.server.extender.shortlist import has_soft_wishes
from devshare.server.extender.verdicts import (
    NamedVerdicts,
    event_safe,
    event_safe_map,
    filter_nodes,
    score_nodes,
    shortlisted,
)
from devshare.server.extender.wire import (
    BadRequest,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    decode_nodes,
    decode_pod,
    decode_pod_id,
    is_null,
)
from devshare.server.extender.writes import PodWrites

log = logging.getLogger(__name__)

NOT_READY = "not ready: state not synced"
NOT_LEADER = "not the leader"
SCORE_REUSE_SECONDS = 2.0  # prioritize reuses the scores of a filter this recent for the same pod
FILTERS_KEPT = 8  # filter results kept for prioritize and bind (each holds arrays over its candidates)
# seconds a node a shortlist of one passed stays held for the pod until its bind comes (kube-scheduler
# sends it right after its scheduling cycle; a hold whose bind never came is released by the expiry)
FILTER_HOLD_TTL = 30.0
PARSED_BYTES = 32 * 2**20  # budget of the pod requests cached by their JSON (bodies included)


class NotReady(Exception):
    """The state is not synced yet: the verb cannot be answered (prioritize gets a 503)."""


@dataclass
class Candidates:
    """The nodes of a filter/prioritize call, resolved against the state, and the full NodeList
    when one was sent (nodeCacheCapable: false)."""

    nodes: NodeSet
    node_list: dict[str, Any] | None = None
    items: list[dict[str, Any]] | None = None

    @property
    def names(self) -> list[str]:
        return self.nodes.names


def names_of_node_list(node_list: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """Names and items of a v1 NodeList."""
    items = node_list.get("items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise BadRequest("Nodes.items must be a list of v1 Node objects")
    names: list[str] = []
    for i, node in enumerate(items):
        name = meta(node).get("name") if isinstance(node, dict) else None
        if not isinstance(name, str) or not name:
            raise BadRequest(f"Nodes.items[{i}] has no metadata.name")
        names.append(name)
    return names, items


PodId = tuple[str, str, str]  # (namespace/name, uid, resourceVersion)
Ints = npt.NDArray[np.int64]
JSON_WHITESPACE = b" \t\r\n"


@dataclass
class Remembered:
    """What a filter computed for prioritize to reuse."""

    pod_id: PodId
    at: float
    encoded: bytes  # the JSON of the names that passed, as kube-scheduler sends it back
    rows: npt.NDArray[np.int64]  # their rows
    raw: npt.NDArray[np.float64]  # and raw scores
    evaluation: PodEvaluation | None  # for the bind: its answer on a node that has not changed since
    layout: int  # the state's layout then (node indexes mean the same nodes while it stays)
    position: npt.NDArray[np.int64] | None = None  # state row -> index in ``rows`` (-1: did not pass)


def request_size(req: PodRequest) -> int:
    """About the bytes a parsed request keeps alive (for the caches' budgets)."""
    return 512 + 4 * len(msgspec.json.encode(req))


def pod_id_of(obj: dict[str, Any]) -> PodId:
    """``(namespace/name, uid, resourceVersion)`` of a Pod object: one version of one pod."""
    m = meta(obj)
    return f"{m.get('namespace')}/{m.get('name')}", str(m.get("uid") or ""), str(m.get("resourceVersion") or "")


def _judged_size(judged: PodRequest | InvalidInput) -> int:
    return len(str(judged)) if isinstance(judged, InvalidInput) else request_size(judged)


def _request(judged: PodRequest | InvalidInput) -> PodRequest:
    """The request kept, or a fresh copy of why it is invalid (raising the kept error would hang a
    traceback on it)."""
    if isinstance(judged, InvalidInput):
        raise InvalidInput(str(judged))
    return judged


MESSAGE_LIMIT = 2048  # characters of a refusal's reason (it may quote a value of any length)


def shorten(message: str) -> str:
    if len(message) <= MESSAGE_LIMIT:
        return message
    cut = len(message) - MESSAGE_LIMIT
    return f"{message[:MESSAGE_LIMIT // 2]}...({cut} characters cut)...{message[-MESSAGE_LIMIT // 2:]}"


def invalid_request(e: InvalidInput) -> str:
    return event_safe(f"invalid request: {shorten(str(e))}")


class Extender:
    """The four verbs. ``is_synced``/``is_leader`` are read on every call (they change at runtime)."""

    def __init__(
        self,
        state: ClusterState,
        backend: Backend,
        *,
        scheduler: Scheduler | None = None,
        is_synced: Callable[[], bool] = lambda: True,
        is_leader: Callable[[], bool] = lambda: True,
        metrics: ExtenderMetrics | None = None,
        assume_ttl: float = DEFAULT_ASSUME_TTL,
        clock: Callable[[], float] = time.monotonic,
        after_bind: Callable[[], None] | None = None,
        disabled_types: frozenset[str] = frozenset(),
        pod_exists: Callable[[str, str], bool] = lambda key, uid: True,
        group_exists: Callable[[str], bool] = lambda group: True,
        note_pod: Callable[[dict[str, Any]], None] | None = None,
        shortlist: int = 0,
        pending_pod: Callable[[str], dict[str, Any] | None] = lambda key: None,
        refuse: Callable[[dict[str, Any], PodRequest], str | None] | None = None,
        scheduler_name: str | None = None,
    ) -> None:
        self.state = state
        # the kube-scheduler profile this extender serves: bind places a pod asking for no device only when
        # it is that profile's (a caller cannot make it bind another scheduler's pods); None: any
        self.scheduler_name = scheduler_name
        # the pending pod ``key`` as the state's watch has it (StateSync.pending_pod): bind decides
        # from it instead of reading the pod again, when it is the pod kube-scheduler filtered
        self.pending_pod = pending_pod
        self.rereads = 0  # binds from the watched pod whose Binding met a changed pod: read and retried
        # filter passes only the best ``shortlist`` nodes of a pod without soft wishes (0: every node
        # that fits); the configuration's scheduling.shortlist, see shortlist.py
        self.shortlist = shortlist
        # whether a pod (key, uid) exists, as the watch has it, and how to tell it of one read from
        # the API server: a group's plan holds devices only for members that exist
        self.pod_exists = pod_exists
        self.group_exists = group_exists
        self.note_pod = note_pod
        self.disabled_types = disabled_types  # device types the configuration switches off
        self.refuse = refuse  # what the configuration refuses of a pod before any node (devshare.config)
        self.backend = backend
        self.scheduler = scheduler or Scheduler(state)
        self.is_synced = is_synced
        self.is_leader = is_leader
        self.metrics = metrics or ExtenderMetrics()
        self.assume_ttl = assume_ttl
        self.clock = clock
        self.lifecycle = Lifecycle(self.scheduler, ttl=assume_ttl)  # assume, confirm, forget, expire
        # the requests of pods as the API server has them (the watch's objects, reads): (key, uid,
        # resourceVersion) -> (request or why it is invalid, whether it has soft wishes: shortlist.py).
        # Only API-server objects go in: a version of a pod is one object, so filter and bind read it once
        self._from_api: ByteLRU[PodId, tuple[PodRequest | InvalidInput, bool]] = ByteLRU(PARSED_BYTES)
        # Pod JSON sent by a caller -> (request or why it is invalid, id, soft wishes): never used by bind
        self._parsed_raw: ByteLRU[bytes, tuple[PodRequest | InvalidInput, PodId, bool]] = ByteLRU(PARSED_BYTES)
        self._last_request: tuple[bytes, tuple[PodRequest | InvalidInput, PodId, bool]] | None = None
        # the last filters' results by pod key, for prioritize and bind (kube-scheduler binds in the
        # background: the next pods' filters may come before a pod's bind)
        self._filtered: OrderedDict[str, Remembered] = OrderedDict()
        self.nodesets = NodeSets(state)
        self.priorities = PriorityEncoder(state)
        # groups and gangs (seed 003), on the same state and lifecycle
        self.planner = GroupPlanner(self.scheduler, lifecycle=self.lifecycle)
        self.writes = PodWrites(backend, after_bind)
        self.members = MemberBinds(state, backend, self.planner, self.writes, self.lifecycle, lambda: self.clock())
        self.preemptor = Preemptor(self.scheduler, backend, lambda: self.clock(), is_leader=lambda: self.is_leader())
        # pods refused for devices in use are nudged when devices free up (kube-scheduler requeues them)
        self.requeue = Requeue(backend, pending_pod=lambda key: self.pending_pod(key),
                               is_leader=lambda: self.is_leader())

    # ------------------------------------------------------------------ helpers
    def parse(self, pod: dict[str, Any]) -> PodRequest:
        """The pod's request, with what the configuration refuses of it (InvalidInput). Not cached."""
        req = parse_pod(pod)
        if self.disabled_types:
            refused = refuse_disabled([d.type for c in req.containers for d in c.devices], self.disabled_types)
            if refused:
                raise InvalidInput(refused)
        refused = self.refuse(pod, req) if self.refuse is not None else None
        if refused:
            raise InvalidInput(refused)
        return req

    def _judged(self, pod: dict[str, Any]) -> tuple[PodRequest | InvalidInput, bool]:
        """:meth:`parse` and whether the pod has soft wishes, an invalid request kept as its error."""
        req: PodRequest | InvalidInput
        try:
            req = self.parse(pod)
        except InvalidInput as e:
            # kept without its traceback: its frames hold the decoded pod and the request body
            req = e.with_traceback(None) if len(str(e)) <= MESSAGE_LIMIT else InvalidInput(shorten(str(e)))
            req.__context__ = None
        return req, has_soft_wishes(pod)

    def from_api(self, pod: dict[str, Any]) -> tuple[PodRequest, bool]:
        """The request of a pod *as the API server has it* (the watch's object or a read, never a
        caller's body) and whether it has soft wishes; InvalidInput when it is not valid. Cached by
        (key, uid, resourceVersion), which name one version of one pod: filter and bind of a pod the
        watch delivered read it once."""
        judged, soft = self._judged_from_api(pod)
        return _request(judged), soft

    def _judged_from_api(self, pod: dict[str, Any]) -> tuple[PodRequest | InvalidInput, bool]:
        pod_id = pod_id_of(pod)
        versioned = bool(pod_id[1] and pod_id[2])
        hit = self._from_api.get(pod_id) if versioned else None
        if hit is None:
            hit = self._judged(pod)
            if versioned:
                self._from_api.put(pod_id, hit, sum(map(len, pod_id)) + _judged_size(hit[0]))
        return hit

    def request_of(self, raw: bytes) -> tuple[PodRequest, PodId, bool]:
        """The request of the ``Pod`` of a filter or prioritize (JSON bytes), its id, and whether it
        has soft wishes kube-scheduler's scoring would weigh (:func:`~devshare.server.extender.
        shortlist.has_soft_wishes`). When the watch holds that very pod (the same uid and
        resourceVersion) it is read from the watch's object (:meth:`from_api`, which bind reads too);
        otherwise from the body, cached by its bytes (kube-scheduler sends the same Pod to filter and
        to prioritize, and again when it retries). The last body's answer is kept as well: a filter
        asks twice (:meth:`look_up_member`, then :meth:`filter`), and the answer is the same for the
        same bytes, whichever way it was read."""
        last = self._last_request
        if last is not None and last[0] == raw:
            judged, pod_id, soft = last[1]
            return _request(judged), pod_id, soft
        named = decode_pod_id(raw)
        hit: tuple[PodRequest | InvalidInput, PodId, bool] | None = None
        if named is not None and (watched := self._watched_version(named)) is not None:
            judged_w, soft_w = self._judged_from_api(watched)
            hit = (judged_w, named, soft_w)
        if hit is None:
            hit = self._parsed_raw.get(raw)
        if hit is None:
            obj = decode_pod(raw)
            pod_id = pod_id_of(obj)
            judged, soft = self._judged(obj)
            hit = (judged, pod_id, soft)
            self._parsed_raw.put(raw, hit, len(raw) + sum(map(len, pod_id)) + _judged_size(judged))
        self._last_request = (raw, hit)
        judged, pod_id, soft = hit
        return _request(judged), pod_id, soft

    def candidates(self, args: ExtenderArgs) -> Candidates:
        """Node names from ``NodeNames`` (nodeCacheCapable) or from the ``Nodes`` NodeList."""
        if not is_null(args.node_names):
            return Candidates(self.nodesets.get(bytes(args.node_names)))
        if is_null(args.nodes):
            raise BadRequest("neither NodeNames nor Nodes is given: send the candidate nodes in one of them")
        node_list = decode_nodes(bytes(args.nodes))
        names, items = names_of_node_list(node_list)
        return Candidates(resolve(self.state, names), node_list, items)

    def _recalled_scores(self, pod_id: PodId, args: ExtenderArgs) -> tuple[Ints, Ints] | None:
        """The scores of the filter just made for this pod, when prioritize asks about the nodes that
        passed it, or some of them (kube-scheduler's other filters may have dropped some): scores as of
        the filter's moment (kube-scheduler too scores on its own snapshot), 0..10 over the nodes asked."""
        r = self._filtered.get(pod_id[0])
        if r is None or r.pod_id != pod_id or not pod_id[1] or self.clock() - r.at > SCORE_REUSE_SECONDS:
            return None
        if is_null(args.node_names) or r.layout != self.state.layout:
            return None
        raw = bytes(args.node_names)
        if raw.translate(None, JSON_WHITESPACE) == r.encoded:  # names hold no whitespace
            return r.rows, scores_from(r.raw)
        nodes = self.nodesets.get(raw)
        if nodes.unknown:
            return None
        if r.position is None:
            r.position = np.full(max(self.state.n_rows, 1), -1, np.int64)
            r.position[r.rows] = np.arange(len(r.rows))
        at = r.position[nodes.rows]
        if (at < 0).any():
            return None  # a node the filter did not pass: evaluate afresh
        return nodes.rows, scores_from(r.raw[at])

    # ------------------------------------------------------------------ groups: members that exist
    async def look_up_member(self, args: ExtenderArgs) -> None:
        """Before filter and prioritize: a group member the watch does not know yet (just created)
        is read from the API server, so that :meth:`missing_member` judges it as it is."""
        if self.note_pod is None or not self.is_synced() or is_null(args.pod):
            return
        try:
            pod, _, _ = self.request_of(bytes(args.pod))
        except (InvalidInput, BadRequest):
            return
        if pod.group is None or self.pod_exists(pod.key, pod.uid):
            return
        try:
            obj = await self.backend.get_pod(pod.namespace, pod.name)
        except BackendError as e:
            log.info("group member %s: cannot read it from the API server: %s", pod.key, e)
            return
        if obj is not None:
            self.note_pod(obj)

    def missing_member(self, pod: PodRequest) -> str | None:
        """Why a group's plan may not hold devices for ``pod`` (None when it exists)."""
        if self.pod_exists(pod.key, pod.uid):
            return None
        return (f"pod {pod.key} (uid {pod.uid or 'none given'}) does not exist in the API server: devshare plans "
                "a group only for pods that exist, and holds nothing for this one")

    def drop_missing_members(self) -> list[str]:
        """Members of group plans whose pods no longer exist give their places up, and the plan of a
        group none of whose pods exists is dropped with every device it held. Returns what went."""
        gone = [m for plan in list(self.planner.plans.values()) for s in plan.slots
                if (m := s.member) is not None and not self.pod_exists(m, "")]
        for key in gone:
            self.members.deleted(key)
        plans = [k for k in list(self.planner.plans) if not self.group_exists(k) and self.planner.drop(k)]
        return gone + [f"the plan of group {k}" for k in plans]

    # ------------------------------------------------------------------ filter
    def filter(self, args: ExtenderArgs) -> ExtenderFilterResult:
        cands = self.candidates(args)
        if not self.is_synced():
            return ExtenderFilterResult(error=NOT_READY)
        try:
            pod, pod_id, soft_wishes = self.request_of(bytes(args.pod))
        except InvalidInput as e:
            reason = invalid_request(e)
            self.metrics.fail("filter", [reason])
            return self._answer(cands, [], {}, dict.fromkeys(cands.names, reason))
        # a pod asking for no device is placed like any other (the node's CPU and memory, the policy's
        # score): kube-scheduler asks about every pod of devshare's profile (deploy/scheduler's config)
        self.lifecycle.arrived(pod)  # the policy learns of each pod once, at its first filter
        if pod.group is not None:
            self._filtered.pop(pod_id[0], None)
            missing = self.missing_member(pod)
            if missing is not None:
                self.metrics.fail("filter", [missing])
                return self._answer(cands, [], dict.fromkeys(cands.names, event_safe(missing)), {})
            nodes = cands.nodes
            outcome = self.planner.filter(pod, nodes.known.tolist(), now=self.clock())
            outcome.unresolvable.update(dict.fromkeys(nodes.unknown, UNKNOWN_NODE))
            if outcome.failed or outcome.unresolvable:
                self.metrics.fail("filter", [*outcome.failed.values(), *outcome.unresolvable.values()])
            return self._answer(cands, outcome.passed, event_safe_map(outcome.failed),
                                event_safe_map(outcome.unresolvable))
        self._drop_hold(pod.key)  # a pod filtered again: its earlier filter's hold no longer stands
        held = self.preemptor.held_nodes(pod)
        short = self.shortlist and not soft_wishes  # kube-scheduler's scores weigh nothing it asked
        # with a shortlist the answer is the few nodes that pass, not the thousand that fail: the failing
        # nodes' reasons are worked out only when no node passes (kube-scheduler reads them only then:
        # the pod's event, preemption). Unknown nodes are still counted.
        ev = self.scheduler.evaluate(pod, cands.nodes.rows) if short else None
        out = shortlisted(ev, cands.nodes, self.shortlist, self.state.rank, held) if ev is not None else None
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
                self.preemptor.maybe_preempt(pod, list(out.failed))
                self.requeue.refused_pod(pod.key, pod_id[1])  # devices in use: nudged when some free up
            elif out.passed_idx.size:
                self.requeue.forget(pod.key)
            if short:
                out = out.best(self.shortlist, self.state.rank)
            if out.engine_reasons:
                self.metrics.fail("filter", out.engine_reasons)
        names_json = out.passed_json()  # compact JSON: what any client sends back to prioritize, less whitespace
        self._remember(Remembered(pod_id, self.clock(), names_json, out.passed_rows,
                                  out.raw_scores, out.evaluation, self.state.layout))
        failed, unresolvable = out.failed, out.unresolvable
        if short and out.passed_idx.size:
            failed, unresolvable = {}, {}
        if cands.node_list is None:
            return ExtenderFilterResult(node_names=msgspec.Raw(names_json), failed_nodes=failed,
                                        failed_and_unresolvable_nodes=unresolvable)
        return self._answer(cands, out.passed, failed, unresolvable)

    def _after_answer(self, pod: PodRequest, pod_id: PodId, out: NamedVerdicts) -> None:
        """What a shortlisted filter leaves for right after its answer is sent: hold its node
        (:meth:`_hold`).

        kube-scheduler schedules one pod at a time, and a filter's answer is on that path: its
        scheduling algorithm's time per pod bounds the pods per second, and the extender's filter
        adds its round trip. Work done after the answer is done while kube-scheduler works on its next
        pod. The callback runs in the event loop's next round, before any request read after it (the
        next filter, this pod's bind).

        (Evaluating the nodes changed since here as well, so that the next filter evaluates nothing,
        was measured and not kept: once per pod it cost more CPU than the misses it saved, since an
        evaluation's cost is mostly fixed, and on two shared cores the CPU is what the next pod waits
        for. BENCHMARKS.md, issue 11's seventh stop.)"""
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
        """Hold the devices of the one node a shortlist of one passes, until the pod's bind comes.

        kube-scheduler assumes the pod on that node at the end of its scheduling cycle and filters the
        next pods while the bind is on its way: without the hold, the next pod could be told the same
        free card, and its bind refused (a wasted cycle). Only for a pod read from the watch (as the
        API server has it: a filter body is never trusted with devices); the bind takes the held
        devices when it binds the same request to the same node (:meth:`_bind_from`), a failed bind
        releases them, a new filter of the pod drops them (:meth:`_drop_hold`), and the expiry
        releases a hold whose bind never came (``FILTER_HOLD_TTL``)."""
        if self.shortlist != 1 or out.passed_idx.size != 1 or self._watched_version(pod_id) is None:
            return
        if pod.key in self.state.pods:
            return  # a bind of it in flight holds devices already
        alloc = out.evaluation.allocation(self.state, int(out.passed_idx[0]))
        try:
            self.lifecycle.assume(pod, alloc, now=self.clock(), ttl=FILTER_HOLD_TTL)
        except Conflict as e:  # the evaluation just said it fits: a bug, but the bind decides again
            log.warning("holding %s on %s after its filter failed: %s", pod.key, alloc.node, e)

    def _drop_hold(self, key: str) -> None:
        """Release what an earlier filter of ``key`` held (not a reservation whose bind is in flight,
        nor a group plan's)."""
        rec = self.state.pods.get(key)
        if rec is not None and rec.phase == "assumed" and rec.hold is None and not self.lifecycle.binding(key):
            self.lifecycle.forget(key)

    def _watched_version(self, pod_id: PodId) -> dict[str, Any] | None:
        """The pending pod the watch holds when it is this very version (the same uid and
        resourceVersion, both given); None otherwise."""
        if not pod_id[1] or not pod_id[2]:
            return None
        watched = self.pending_pod(pod_id[0])
        return watched if watched is not None and pod_id_of(watched)[1:] == pod_id[1:] else None

    def _remember(self, r: Remembered) -> None:
        self._filtered.pop(r.pod_id[0], None)
        self._filtered[r.pod_id[0]] = r
        if len(self._filtered) > FILTERS_KEPT:
            self._filtered.popitem(last=False)

    @staticmethod
    def _answer(cands: Candidates, passed: list[str], failed: dict[str, str],
                unresolvable: dict[str, str]) -> ExtenderFilterResult:
        if cands.node_list is None:
            return ExtenderFilterResult(node_names=passed, failed_nodes=failed,
                                        failed_and_unresolvable_nodes=unresolvable)
        keep = set(passed)
        items = [n for n, name in zip(cands.items or [], cands.names, strict=True) if name in keep]
        node_list = {**cands.node_list, "items": items}
        return ExtenderFilterResult(nodes=node_list, failed_nodes=failed, failed_and_unresolvable_nodes=unresolvable)

    # ------------------------------------------------------------------ prioritize
    def prioritize(self, args: ExtenderArgs) -> bytes:
        """The HostPriorityList, encoded (JSON bytes)."""
        if not self.is_synced():
            self.candidates(args)  # a malformed body is still a 400
            raise NotReady(NOT_READY)
        try:
            pod, pod_id, _ = self.request_of(bytes(args.pod))
        except InvalidInput:
            names = self.candidates(args).names
            return encode_priorities(names, [0] * len(names))
        recalled = self._recalled_scores(pod_id, args) if pod.group is None else None
        if recalled is not None:
            return self.priorities.encode(*recalled)
        cands = self.candidates(args)
        names = cands.names
        if pod.group is not None:
            if self.missing_member(pod) is not None:
                return encode_priorities(names, [0] * len(names))
            planned = self.planner.planned_node(pod, cands.nodes.known.tolist(), now=self.clock())
            return encode_priorities(names, [PLANNED_SCORE if n == planned else 0 for n in names])
        scores = score_nodes(self.scheduler, pod, cands.nodes)
        if not cands.nodes.unknown:
            return self.priorities.encode(cands.nodes.rows, scores)
        by_name = dict(zip(cands.nodes.known.tolist(), scores.tolist(), strict=True))
        return encode_priorities(names, [by_name.get(n, 0) for n in names])

    # ------------------------------------------------------------------ bind
    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        error = event_safe(await self._bind(args))
        if error:
            self.metrics.fail("bind", [error])
            log.info("bind %s/%s to %s refused: %s", args.pod_namespace, args.pod_name, args.node, error)
        return ExtenderBindingResult(error=error)

    async def _bind(self, args: ExtenderBindingArgs) -> str:
        ns, name, node = args.pod_namespace, args.pod_name, args.node
        key = f"{ns}/{name}"
        if not self.is_synced():
            return NOT_READY
        if not self.is_leader() and (self.writes.fence is None or await self.writes.fence() is not None):
            # judged afresh before refusing: a follower's last read of its kube-scheduler's Lease may be
            # up to a second old, and kube-scheduler binds as soon as it holds the Lease
            return NOT_LEADER
        if self.lifecycle.binding(key):
            return f"pod {key}: a bind is already in progress"
        with self.lifecycle.bind_in_flight(key):
            if self.members.unbound:
                await self.members.retry_unbound()
            return await self._bind_one(ns, name, node, args.pod_uid)

    async def _bind_one(self, ns: str, name: str, node: str, uid: str) -> str:
        key = f"{ns}/{name}"
        watched = self._watched_pod(key, uid)
        if watched is not None:
            error, conflict = await self._bind_from(watched, ns, name, node, uid)
            if not conflict:
                return error
            # the pod changed since the watch delivered it (or is bound): read it once, decide again
            self.rereads += 1
        try:
            obj = await self.backend.get_pod(ns, name)
        except BackendError as e:
            return f"reading pod {key} from the API server failed: {e}"
        if obj is None:
            return f"pod {key} not found"
        error, _ = await self._bind_from(obj, ns, name, node, uid)
        return error

    def _watched_pod(self, key: str, uid: str) -> dict[str, Any] | None:
        """The pending pod from the state's watch, when it is the very pod kube-scheduler scheduled: the
        same uid and resourceVersion as in the filter this extender answered for it. The object is the
        API server's (never the filter's body); the Binding carries its resourceVersion, so a pod that
        changed since is not bound from it (a 409, then :meth:`_bind_one` reads it afresh)."""
        obj = self.pending_pod(key)
        if obj is None:
            return None
        _, uid_seen, version_seen = pod_id_of(obj)
        seen = (key, uid_seen, version_seen)
        r = self._filtered.get(key)
        if r is None or not seen[1] or not seen[2] or r.pod_id != seen or (uid and uid != seen[1]):
            return None
        return obj

    async def _bind_from(self, obj: dict[str, Any], ns: str, name: str, node: str, uid: str) -> tuple[str, bool]:
        """Bind the pod ``obj`` (as the API server has it) to ``node``: the error ("" when bound) and
        whether the Binding failed on a precondition (409)."""
        key = f"{ns}/{name}"
        m = meta(obj)
        if uid and m.get("uid") and m.get("uid") != uid:
            return f"pod {key} has uid {m.get('uid')}, not {uid}: it was deleted and re-created", False
        bound_to = (obj.get("spec") or {}).get("nodeName")
        if bound_to:
            if bound_to == node and self.members.is_bound(key, node):
                return "", False  # a group member the extender bound itself when its gang reached its quorum
            return f"pod {key} is already bound to node {bound_to}", False
        try:
            # the pod as the API server has it: never a request read from a /filter body, which
            # anyone can send with a real pod's name, uid and resourceVersion
            pod, _ = self.from_api(obj)
        except InvalidInput as e:
            return invalid_request(e), False
        scheduler = (obj.get("spec") or {}).get("schedulerName") or "default-scheduler"
        if not pod.has_devices() and self.scheduler_name is not None and scheduler != self.scheduler_name:
            return (f"pod {key} asks for no device devshare manages and is {scheduler}'s (spec.schedulerName), "
                    f"not {self.scheduler_name}'s: devshare binds only the pods of its profile; its own "
                    "scheduler binds this one"), False
        if node not in self.state.nodes:
            return f"node {node} is not known to devshare (no such Node, or no Device object lists its devices)", False
        if pod.group is not None:
            return await self.members.bind(pod, node, obj), False

        # ---- synchronous: choose and reserve (no await in between) ----
        stale = self.state.pods.get(key)
        alloc: PodAllocation | None = None
        if stale is not None:
            if stale.phase == "bound":
                return f"pod {key} already holds devices on node {stale.allocation.node}", False
            if stale.hold is None and stale.allocation.node == node and stale.pod == pod:
                alloc = stale.allocation  # its filter's hold (_hold): the devices kube-scheduler was told of
            else:
                self.lifecycle.forget(key)  # a leftover reservation of an earlier attempt
        if alloc is None:
            r = self._filtered.get(key)
            # the filter's devices are reused only when it judged this very request
            evaluated = (r.evaluation if r is not None and r.evaluation is not None and r.evaluation.pod == pod
                         else None)
            found = self.scheduler.allocate_on(pod, node, evaluated=evaluated)
            if isinstance(found, str):
                return f"pod {key} does not fit on node {node}: {found}", False
            alloc = found
            try:
                self.lifecycle.assume(pod, alloc, now=self.clock())
            except Conflict as e:
                return f"pod {key}: {e}", False
        annotations = encode_annotations(pod, alloc, now_ns=time.time_ns(),
                                         device_memory=self.state.gpu_memory(node))
        # ---- asynchronous: one write, the Binding with the allocation annotations ----
        done = False
        try:
            error, conflict = await self.writes.try_bind(ns, name, node, uid, pod=pod, allocation=alloc,
                                                         annotations=annotations,
                                                         resource_version=str(m.get("resourceVersion") or "") or None)
            if error:
                return error, conflict
            done = True
        finally:
            if not done:
                self.lifecycle.forget(key, alloc)
        reason = self.lifecycle.confirm(pod, alloc)
        if reason is not None:
            log.warning("pod %s was bound after its reservation expired; its devices are now over-used: %s",
                        pod.key, reason)
        self.preemptor.done(pod.key)
        self.requeue.forget(pod.key)
        return "", False

    def pod_changed(self, kind: str, type_: str, obj: dict[str, Any]) -> None:
        """StateSync's hook: a deleted group member gives up its place in its group's plan; freed
        devices nudge the pods refused for lack of them (:mod:`requeue`); the claims learn which claimed
        pods are bound (:meth:`Claims.pod_changed`); a pending pod of this scheduler has its request
        read (:meth:`from_api`'s cache), so that its filter does not."""
        claims = self.writes.claims
        if kind == "pods" and claims is not None:
            claims.pod_changed(type_, obj)
        if kind == "pods" and type_ != "DELETED" and self.is_synced() and self.pending_pod(object_key(obj)) is obj:
            # a pod of this scheduler waiting for a node: its request is read now, while nothing waits on
            # it, rather than in its filter, which kube-scheduler waits for (cached by uid and version)
            self._judged_from_api(obj)
        if kind == "pods" and type_ != "DELETED":
            self._learn_bound_elsewhere(obj)
        self.requeue.changed(kind, type_, obj)
        if kind == "pods" and type_ == "DELETED":
            self.members.deleted(object_key(obj))
            self.preemptor.done(object_key(obj))
            if self.planner.plans:
                self.drop_missing_members()

    def _learn_bound_elsewhere(self, obj: dict[str, Any]) -> None:
        """A pod bound without devshare (it asks for no device, or another scheduler placed it) is told to
        the policy once, as the simulator's policy learns of every pod: the CPU it takes is part of the
        task mix devshare's policy packs against (issue 41)."""
        key = object_key(obj)
        plain = self.state.plain.get(key)
        uid = str(meta(obj).get("uid") or "")
        if plain is None or self.lifecycle.has_arrived(key, uid):
            return
        try:
            pod = parse_pod(obj)
        except InvalidInput:
            ns, _, name = key.partition("/")
            pod = PodRequest(namespace=ns, name=name, uid=uid, cpu_milli=plain[1], memory_bytes=plain[2])
        self.lifecycle.arrived(pod)

    # ------------------------------------------------------------------ preempt
    def preempt(self, args: ExtenderPreemptionArgs) -> ExtenderPreemptionResult:
        if not self.is_synced():
            raise NotReady(NOT_READY)
        return _preempt.preempt(self.scheduler, args, parse=self.parse)

    # ------------------------------------------------------------------ expiry
    def expire(self) -> list[str]:
        """Drop reservations whose bind never completed (not those with a bind in flight)."""
        now = self.clock()
        if self.is_synced():
            gone = self.drop_missing_members()
            if gone:
                log.info("group members that no longer exist gave up their places: %s", ", ".join(gone))
        plans = self.planner.expire(now)
        if plans:
            log.warning("group plans expired before their members bound (devices released): %s", ", ".join(plans))
        gone = self.lifecycle.expire(now)
        if gone:
            log.warning("reservations expired without a bind: %s", ", ".join(gone))
        return gone

    async def expire_forever(self, interval: float = 5.0) -> None:
        while True:
            await asyncio.sleep(interval)
            self.expire()
            if self.writes.claims is not None and self.is_synced():
                try:
                    await self.writes.claims.sweep(leading=self.is_leader())
                except Exception:  # never let one surprise stop the expiry
                    log.exception("sweeping the claim ledger failed")


def result_of(answer: ExtenderFilterResult | ExtenderBindingResult) -> str:
    return ERROR if answer.error else OK
