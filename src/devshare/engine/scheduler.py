"""Scheduling one pod: filter every candidate node, score the ones that fit, pick the best, and
say which devices each container gets. The extender, the simulator and ``devshare schedule`` all
call this.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np
import numpy.typing as npt

from devshare.engine.caches import Identity
from devshare.engine.handlers import HANDLERS
from devshare.engine.handlers.base import (
    ERROR,
    SUCCESS,
    UNRESOLVABLE,
    UNSCHEDULABLE,
    Context,
    DeviceHandler,
    Evaluation,
    Settings,
)
from devshare.engine.handlers.share import stale_elsewhere
from devshare.engine.policies.base import Policy
from devshare.engine.policies.binpack import BinpackPolicy
from devshare.engine.quotas import Quotas
from devshare.engine.state import ClusterState
from devshare.model import initplan, names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.initplan import InitPlan
from devshare.model.request import PodRequest

log = logging.getLogger(__name__)
Ints = npt.NDArray[np.int64]
ERROR, SUCCESS, UNRESOLVABLE = int(ERROR), int(SUCCESS), int(UNRESOLVABLE)
UNKNOWN_NODE = "node is not known to devshare (no such Node, or no Device object yet)"


def pod_shape(pod: PodRequest) -> PodRequest:
    """The pod without who it is (name, uid, priority): what its answers on a node may depend on (the
    key of the answers kept per node, with the node's version: :mod:`devshare.engine.caches`)."""
    return msgspec.structs.replace(pod, namespace="", name="", uid="", priority=0)


@dataclass
class FilterOutcome:
    """Per node: passed, failed (preemption might help) or unresolvable, with reasons (the group
    planner's answer; a single pod's is :class:`Verdicts`, over node indexes)."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)


@dataclass
class Verdicts:
    """The filter over candidate rows, as arrays: indexes into the rows that passed, failed
    (freeing devices could help: kube-scheduler's FailedNodes) and unresolvable, with the reasons of
    the last two in the same order."""

    evaluation: PodEvaluation
    passed: Ints
    failed: Ints
    failed_reasons: list[str]
    unresolvable: Ints
    unresolvable_reasons: list[str]


@dataclass(frozen=True)
class Placement:
    node: str
    allocation: PodAllocation
    score: float


@dataclass
class PodEvaluation:
    """The combined verdict of every device handler the pod needs, over ``rows``."""

    pod: PodRequest
    rows: Ints
    codes: npt.NDArray[np.int8]
    scores: npt.NDArray[np.float64]
    parts: list[Evaluation]
    node_reasons: dict[int, str]
    versions: Ints  # each row's version when evaluated
    # a reason that depends on more than the pod's shape and the node (a namespace's quota): the
    # per-shape cache of reason texts is not used
    fresh: bool = False
    # a pod whose init containers ask for devices: what was placed for it (devshare.model.initplan)
    plan: InitPlan | None = None

    def reason(self, i: int) -> str:
        if i in self.node_reasons:
            return self.node_reasons[i]
        for ev in self.parts:
            if ev.codes[i] != SUCCESS:
                return ev.reason(i)
        return ""

    def reasons(self, state: ClusterState, settings: Settings, idx: Ints) -> list[str]:
        """:meth:`reason` of the rows at ``idx``. A node that stays full stays full for many pods of
        the same shape, so its text is kept, per pod shape, until that node changes (its row
        version): thousands of failing nodes cost one array lookup, not a text each."""
        if idx.size == 0:
            return []
        if self.fresh:
            return [self.reason(int(i)) for i in idx.tolist()]
        texts, versions = state.caches.per_node(
            "reasons", (pod_shape(self.pod), settings),
            lambda size: (np.empty(size, dtype=object), np.full(size, -1, np.int64)))
        rows = self.rows[idx]
        now = state.row_version[rows]
        for k in np.flatnonzero(versions[rows] != now).tolist():
            i, row = int(idx[k]), int(rows[k])
            texts[row] = self.reason(i)
            # an internal error (seed 004's Error) is not kept: the next pod tries again
            versions[row] = now[k] if self.codes[i] != ERROR else -1
        return list(texts[rows].tolist())

    def allocation(self, state: ClusterState, i: int) -> PodAllocation:
        by_container: dict[int, list[DeviceGrant]] = {}
        for ev in self.parts:
            for ci, grants in ev.grant(i).items():
                by_container.setdefault(ci, []).extend(grants)
        node = state.name_of[int(self.rows[i])]
        placed = self.plan.placed if self.plan is not None else self.pod.containers
        alloc = PodAllocation(
            node=node,
            containers=tuple(
                ContainerAllocation(name=c.name, devices=tuple(by_container.get(ci, [])))
                for ci, c in enumerate(placed)
            ),
        )
        if self.plan is None:
            return alloc
        totals = {(names.GPU, minor): total for minor, total in state.gpu_memory(node).items()}
        return initplan.expand(self.pod, self.plan, alloc, totals)


class Scheduler:
    def __init__(self, state: ClusterState, *, policy: Policy | None = None,
                 settings: Settings | None = None, quotas: Quotas | None = None) -> None:
        self.state = state
        self.settings = settings or Settings()
        self.quotas = quotas  # per-namespace GPU quotas (the configuration file's quotas)
        self.policy: Policy = policy or BinpackPolicy(
            card_binpack=self.settings.card_binpack,
            node_binpack=self.settings.node_binpack,
            core_weight=self.settings.core_weight,
        )

    # ------------------------------------------------------------------ core
    def evaluate(self, pod: PodRequest, rows: Ints) -> PodEvaluation:
        """Every verdict of ``pod`` over ``rows``: codes, scores, reasons and devices.

        For a pod whose answer on a node depends on that node alone (one device type asked by one
        container, a policy whose answers may be kept, no namespace quota), each node's answer is
        kept per pod shape until the node changes (its row version). Between two pods only the
        nodes they took change, and kube-scheduler sends each pod another window of its nodes, so
        most windows are answered from what is kept: a few gathers instead of the whole evaluation.
        The window's nodes that changed are evaluated on their own, together with every other node
        that changed since it was kept (:func:`stale_elsewhere`), so that the next windows find
        theirs fresh. A failing node's reason is worked out when asked (:meth:`PodEvaluation.reasons`
        keeps the texts per node as well)."""
        if pod.init_containers:  # init containers asking for devices: place what kubelet needs (initplan)
            plan = initplan.plan(pod)
            ev = self.evaluate(msgspec.structs.replace(pod, containers=plan.placed, init_containers=()), rows)
            ev.pod, ev.plan = pod, plan
            return ev
        kept = self._kept_answers(pod)
        if kept is None or not rows.size:
            return self._evaluate(pod, rows)
        (codes_k, scores_k, cols_k, version_k), ctx, handler = kept
        state = self.state
        now = state.row_version[rows]
        changed = version_k[rows] != now
        if changed.any():
            # the window's changed nodes, and every other node changed since it was kept: evaluated
            # on their own (the window's others are kept), so that the next windows find theirs fresh
            missing = rows[changed]
            stale = stale_elsewhere(state, version_k, missing)
            both = np.concatenate([missing, stale]) if stale.size else missing
            ev = self._evaluate(pod, both)
            chosen = ev.parts[0].columns if len(ev.parts) == 1 else None
            if chosen is None:
                return self._evaluate(pod, rows)
            keep = ev.codes != ERROR  # an internal error is not kept: the next pod tries again
            at = both[keep]
            codes_k[at], scores_k[at], cols_k[at], version_k[at] = (
                ev.codes[keep], ev.scores[keep], chosen[keep], ev.versions[keep])
            if not keep.all():
                return self._evaluate(pod, rows)
        cols = cols_k[rows]
        fresh: list[PodEvaluation] = []

        def explain(i: int) -> str:  # the reason of a failing node: the window evaluated afresh, once
            if not fresh:
                fresh.append(self._evaluate(pod, rows))
            return fresh[0].reason(i)

        codes, scores = codes_k[rows], scores_k[rows]
        part = Evaluation(rows, codes, scores, explain, handler.grants_of(ctx, rows, cols), columns=cols)
        return PodEvaluation(pod, rows, codes, scores, [part], {}, now)

    def _kept_answers(self, pod: PodRequest) -> tuple[tuple[npt.NDArray[np.int8], npt.NDArray[np.float64], Ints,
                                                            Ints], Context, DeviceHandler] | None:
        """The per-node answers kept for ``pod``'s shape (codes, scores, device columns, the row
        version each was kept at, -1 for none), or None when its answers are not kept."""
        if self.quotas and pod.namespace in self.quotas.limits:
            return None  # its namespace's usage elsewhere may change the answer
        types = pod.device_types()
        if len(types) != 1:
            return None
        handler = HANDLERS[types[0]]
        ctx = Context(state=self.state, pod=pod, settings=self.settings, policy=self.policy)
        declared = handler.answer_key(ctx)
        if declared is None:
            return None

        def make(size: int) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float64], Ints, Ints]:
            count = pod.needs(types[0])[0][1].count  # devices the one asking container takes
            return (np.zeros(size, np.int8), np.zeros(size, np.float64), np.zeros((size, count), np.int64),
                    np.full(size, -1, np.int64))

        arrays = self.state.caches.per_node(
            "evaluations", (pod_shape(pod), declared, self.settings, Identity(self.policy)), make)
        return arrays, ctx, handler

    def _evaluate(self, pod: PodRequest, rows: Ints) -> PodEvaluation:
        state = self.state
        m = len(rows)
        codes = np.zeros(m, np.int8)
        node_reasons: dict[int, str] = {}
        inactive = ~state.active[rows]
        for i in np.flatnonzero(inactive).tolist():
            node_reasons[i] = "node is unschedulable (cordoned)"
        codes[inactive] = UNRESOLVABLE
        if pod.cpu_milli:
            short = (codes == 0) & state.cpu_short(rows, pod.cpu_milli)
            codes[short] = UNSCHEDULABLE
            for i in np.flatnonzero(short).tolist():
                node_reasons[i] = "not enough CPU"
        if pod.memory_bytes:
            short = (codes == 0) & state.memory_short(rows, pod.memory_bytes)
            codes[short] = UNSCHEDULABLE
            for i in np.flatnonzero(short).tolist():
                node_reasons[i] = "not enough memory"
        quotas = self.quotas if self.quotas and pod.has_devices() else None
        over = quotas.refuse_everywhere(state, pod) if quotas is not None else None
        if over is not None:
            codes[:] = UNRESOLVABLE
            return PodEvaluation(pod, rows, codes, np.zeros(m, np.float64), [], dict.fromkeys(range(m), over),
                                 state.row_version[rows], fresh=True)
        ctx = Context(state=state, pod=pod, settings=self.settings, policy=self.policy)
        parts: list[Evaluation] = []
        scores = np.zeros(m, np.float64)
        types = pod.device_types()
        live = np.flatnonzero(codes == SUCCESS)
        for k, dtype in enumerate(types):
            try:
                ev_live = HANDLERS[dtype].evaluate(ctx, rows[live])
            except Exception as e:  # a handler bug must not take the scheduler down: seed 004's Error
                log.exception("the %s handler failed on pod %s", dtype, pod.key)
                ev_live = _error(rows[live], f"internal error in the {dtype} handler: {type(e).__name__}: {e}")
            ev = _widen(ev_live, live, rows)
            parts.append(ev)
            codes = np.maximum(codes, ev.codes)
            # the first device type (GPUs when asked) leads the score; others refine it
            scores += ev.scores * (1.0 if k == 0 else 0.1)
            live = np.flatnonzero(codes == SUCCESS)
        if not types and live.size:
            from devshare.engine.fit import FitView

            view = FitView(state, pod, rows[live], None, None, np.zeros((live.size, 0), np.bool_))
            scores[live] = self.policy.choose(view).scores
        result = PodEvaluation(pod, rows, codes, scores, parts, node_reasons, state.row_version[rows])
        if quotas is not None and live.size:
            over_rows = quotas.refuse_per_row(state, pod, rows, live, lambda i: result.allocation(state, i))
            for i, reason in over_rows.items():
                codes[i] = UNRESOLVABLE
                node_reasons[i] = reason
                result.fresh = True
        return result

    def _rows(self, nodes: Sequence[str] | None) -> tuple[Ints, list[str]]:
        if nodes is None:
            rows = self.state.node_rows()
            return rows, []
        row_of = self.state.row_of
        unknown = [n for n in nodes if n not in row_of]
        if not unknown and len(nodes) == len(row_of) and len(set(nodes)) == len(row_of):
            return self.state.node_rows(), unknown  # every node: the sorted (often contiguous) rows
        return self.state.node_rows(nodes), unknown

    # ------------------------------------------------------------------ extender verbs
    def verdicts(self, pod: PodRequest, rows: Ints, *, evaluation: PodEvaluation | None = None) -> Verdicts:
        """Filter ``rows``: which pass, which fail and why, without a Python step per passing node.
        ``evaluation``: ``pod``'s evaluation over ``rows`` made just before (not made again)."""
        ev = self.evaluate(pod, rows) if evaluation is None else evaluation
        codes = ev.codes
        hard = np.flatnonzero(codes == UNRESOLVABLE)
        # UNSCHEDULABLE, or ERROR (an internal failure: retrying may help)
        soft = np.flatnonzero((codes != SUCCESS) & (codes != UNRESOLVABLE))
        return Verdicts(ev, np.flatnonzero(codes == SUCCESS), soft, ev.reasons(self.state, self.settings, soft),
                        hard, ev.reasons(self.state, self.settings, hard))

    def place(self, pod: PodRequest, nodes: Sequence[str] | None = None) -> Placement | None:
        """The best node and allocation for ``pod`` (ties: lowest ``state.rank``), or None."""
        rows, _ = self._rows(nodes)
        if rows.size == 0:
            return None
        ev = self.evaluate(pod, rows)
        ok = np.flatnonzero(ev.codes == SUCCESS)
        if ok.size == 0:
            return None
        s = ev.scores[ok]
        best = ok[s >= s.max() - 1e-9]
        i = int(best[np.argmin(self.state.rank[rows[best]])])
        return Placement(self.state.name_of[int(rows[i])], ev.allocation(self.state, i), float(ev.scores[i]))

    def why_unschedulable(self, pod: PodRequest, nodes: Sequence[str] | None = None, limit: int = 3) -> str:
        """A short summary of why no node fits (the most common reasons first)."""
        rows, unknown = self._rows(nodes)
        v = self.verdicts(pod, rows)
        reasons = [UNKNOWN_NODE] * len(unknown) + v.unresolvable_reasons + v.failed_reasons
        if not reasons:
            return "no nodes" if not v.passed.size else ""
        name_of = self.state.name_of
        by_reason: dict[str, list[str]] = {}
        for node, r in [*zip(unknown, [UNKNOWN_NODE] * len(unknown), strict=True),
                        *zip((name_of[int(x)] for x in rows[v.unresolvable]), v.unresolvable_reasons, strict=True),
                        *zip((name_of[int(x)] for x in rows[v.failed]), v.failed_reasons, strict=True)]:
            by_reason.setdefault(r, []).append(node)
        top = sorted(by_reason.items(), key=lambda kv: -len(kv[1]))[:limit]
        return f"0/{len(reasons) + len(v.passed)} nodes fit: " + "; ".join(
            f"{_nodes(names)}: {r}" for r, names in top)

    def allocate_on(self, pod: PodRequest, node: str, *,
                    evaluated: PodEvaluation | None = None) -> PodAllocation | str:
        """The allocation the pod gets on ``node``, or the reason it does not fit there.

        ``evaluated``: an earlier evaluation of the same pod (the filter's); its answer for ``node``
        is used as is when that node has not changed since (nothing else can change the answer, but
        a namespace quota: a pod under one is always judged afresh)."""
        row = self.state.row_of.get(node)
        if row is None:
            return f"node {node} is not known to devshare"
        if self.quotas and pod.namespace in self.quotas.limits:
            evaluated = None  # the namespace's usage may have changed elsewhere since: judge it afresh
        if evaluated is not None and evaluated.pod == pod:
            at = np.flatnonzero(evaluated.rows == row)
            if at.size and evaluated.versions[at[0]] == self.state.row_version[row]:
                i = int(at[0])
                if evaluated.codes[i] == SUCCESS:
                    return evaluated.allocation(self.state, i)
        ev = self.evaluate(pod, np.array([row], np.int64))
        if ev.codes[0] != SUCCESS:
            return ev.reason(0)
        return ev.allocation(self.state, 0)


def _nodes(names: list[str], shown: int = 3) -> str:
    """``node-1``, ``node-1, node-2``, or ``5 nodes (node-1, node-2, node-3, ...)``."""
    if len(names) == 1:
        return names[0]
    listed = ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")
    return f"{len(names)} nodes ({listed})"


def _error(rows: Ints, reason: str) -> Evaluation:
    """Every row fails with seed 004's Error code and the same reason."""
    return Evaluation(rows, np.full(len(rows), ERROR, np.int8), np.zeros(len(rows), np.float64),
                      lambda i: reason, lambda i: {})


def _widen(ev: Evaluation, live: Ints, rows: Ints) -> Evaluation:
    """Lift an evaluation over ``rows[live]`` to all of ``rows`` (others: UNRESOLVABLE, not asked)."""
    if live.size == len(rows):
        return ev
    codes = np.full(len(rows), UNRESOLVABLE, np.int8)
    scores = np.zeros(len(rows), np.float64)
    codes[live] = ev.codes
    scores[live] = ev.scores
    pos = {int(g): k for k, g in enumerate(live.tolist())}
    columns = None
    if ev.columns is not None:
        columns = np.zeros((len(rows), ev.columns.shape[1]), np.int64)
        columns[live] = ev.columns
    return Evaluation(
        rows, codes, scores,
        lambda i: ev.explain(pos[i]) if i in pos else "",
        lambda i: ev.grant(pos[i]),
        columns,
    )
