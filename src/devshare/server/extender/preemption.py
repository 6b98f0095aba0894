"""GPU preemption: the ``/preempt`` verb, and preemption driven by the extender itself.

**The verb.** kube-scheduler picks victims by its own view (CPU, memory, counts of extended resources)
and asks the extender which of them to keep. For each node, on a what-if copy of that node
(:meth:`Lifecycle.what_if`; the live state is never touched): the victims devshare holds devices for
are released, lowest priority first, until the pod fits; then each released victim the pod still fits
without is spared (highest priority first). A node where even all of them do not make room is left
out. Victims devshare holds nothing for are kept as proposed (chosen for kube-scheduler's own reasons);
``NumPDBViolations`` is passed through, capped at the number of victims kept.

**Preemption by the extender.** kube-scheduler cannot preempt for devices it does not see: its
DefaultPreemption plugin (v1.37, ``SelectVictimsOnNode``) gives every victim back while the preemptor
passes its *own* filters, and devshare's resources are ignored by its resource fit
(``ignoredResources``), so the node has no victims and ``/preempt`` is never asked. So when a filter
finds no node for a pod that may preempt (``preemptionPolicy`` is not ``Never``) and some nodes failed
only for devices in use, the extender asks each such node (at most ``max_candidates``) for the fewest
lower-priority victims, picks the node kube-scheduler's ``pickOneNodeForPreemption`` would (the lowest
highest victim priority, then the smallest sum of priorities, then the fewest victims), *nominates* it
for the pod (a timed hold of the lifecycle: until the pod binds, is deleted or ``ttl`` passes, pods of
lower priority do not pass it), writes a ``Preempted`` event on each victim and deletes it with its own
grace period. A nomination is made once; only the leader preempts, and every write is checked against
its Lease just before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from devshare.engine.lifecycle import Lifecycle, Nomination
from devshare.engine.records import PodRecord
from devshare.engine.scheduler import Scheduler
from devshare.kube.backend import Backend
from devshare.kube.errors import BackendError, NotFound
from devshare.model.allocation import PodAllocation
from devshare.model.dra import is_claim_record
from devshare.model.errors import InvalidInput
from devshare.model.kubeobjects import meta
from devshare.model.request import PodRequest
from devshare.server.extender.events import Events, pod_event
from devshare.server.extender.view import Leadership
from devshare.server.extender.wire import ExtenderPreemptionArgs, ExtenderPreemptionResult, MetaPod, MetaVictims

log = logging.getLogger(__name__)

NOMINATION_TTL = 60.0
MAX_CANDIDATES = 100  # kube-scheduler's default: at most 100 candidate nodes (minCandidateNodesAbsolute)


class Victim:
    __slots__ = ("index", "key", "priority", "uid")

    def __init__(self, uid: str, key: str | None, priority: int, index: int) -> None:
        self.uid = uid
        self.key = key  # ns/name of a pod the state holds devices for, else None
        self.priority = priority
        self.index = index  # position in kube-scheduler's list (ties keep that order)


def needed_victims(lifecycle: Lifecycle, pod: PodRequest, node: str, keys: list[str]) -> list[str] | None:
    """The fewest of ``keys`` (ordered lowest priority first) to release so that ``pod`` fits on
    ``node``, or None when releasing all of them is not enough. Asked on a what-if copy of the node."""
    what_if = lifecycle.what_if([node])
    # whether the pod fits does not depend on the policy (it only ranks what fits): the default one
    probe = Scheduler(what_if.state, settings=lifecycle.scheduler.settings)

    def fits() -> bool:
        return isinstance(probe.allocate_on(pod, node), PodAllocation)

    if fits():
        return []
    released: list[PodRecord] = []
    for key in keys:
        rec = what_if.release(key)
        if rec is None:
            continue
        released.append(rec)
        if fits():
            break
    else:
        return None
    needed: list[str] = []
    for rec in reversed(released):  # highest priority first: the ones most worth sparing
        what_if.add(rec.pod, rec.allocation)
        if not fits():
            what_if.release(rec.pod.key)
            needed.append(rec.pod.key)
    needed.reverse()
    return needed


class Preemption:
    def __init__(self, lifecycle: Lifecycle, backend: Backend, leadership: Leadership, events: Events, *,
                 parse: Callable[[dict[str, Any]], PodRequest], clock: Callable[[], float],
                 ttl: float = NOMINATION_TTL, max_candidates: int = MAX_CANDIDATES) -> None:
        self.lifecycle = lifecycle
        self.state = lifecycle.state
        self.backend = backend
        self.leadership = leadership
        self.events = events
        self.parse = parse  # a pod's request with the configuration's refusals (Requests.parse)
        self.clock = clock
        self.ttl = ttl
        self.max_candidates = max_candidates
        self.tasks: set[asyncio.Task[None]] = set()
        self.evicted = 0
        self._lowest: tuple[int, int | None] = (-1, None)  # (state version, lowest priority of any pod record)

    # ------------------------------------------------------------------ the verb
    def preempt(self, args: ExtenderPreemptionArgs) -> ExtenderPreemptionResult:
        proposed = self._victims_of(args)
        try:
            pod = self.parse(args.pod)
        except InvalidInput:
            return ExtenderPreemptionResult()  # the pod cannot be placed anywhere: no candidates
        out: dict[str, MetaVictims] = {}
        for node, (victims, pdb) in proposed.items():
            if not pod.has_devices():
                kept = victims
            else:
                holders = sorted((v for v in victims if v.key is not None), key=lambda v: (v.priority, v.index))
                needed = needed_victims(self.lifecycle, pod, node, [v.key for v in holders if v.key])
                if needed is None:
                    continue
                chosen = set(needed)
                kept = [v for v in victims if v.key is None or v.key in chosen]
            out[node] = MetaVictims(pods=[MetaPod(uid=v.uid) for v in kept], num_pdb_violations=min(pdb, len(kept)))
        return ExtenderPreemptionResult(node_name_to_meta_victims=out)

    def _victims_of(self, args: ExtenderPreemptionArgs) -> dict[str, tuple[list[Victim], int]]:
        """Per node: the proposed victims and the proposed NumPDBViolations."""
        pods = self.state.pods
        by_uid = {rec.pod.uid: key for key, rec in pods.items() if rec.pod.uid}
        out: dict[str, tuple[list[Victim], int]] = {}
        for node, mv in (args.node_name_to_meta_victims or {}).items():
            found = [by_uid.get(p.uid) for p in mv.pods]
            out[node] = ([Victim(p.uid, k, pods[k].pod.priority if k is not None else 0, i)
                          for i, (p, k) in enumerate(zip(mv.pods, found, strict=True))], mv.num_pdb_violations)
        for node, v in (args.node_name_to_victims or {}).items():
            if node in out:
                continue
            vs = []
            for i, pod in enumerate(v.pods):
                m = meta(pod)
                uid = str(m.get("uid") or "")
                key: str | None = f"{m.get('namespace') or 'default'}/{m.get('name')}"
                if key not in pods or (uid and pods[key].pod.uid not in ("", uid)):
                    key = by_uid.get(uid)
                spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
                given = spec.get("priority") if isinstance(spec, dict) else None
                prio = given if isinstance(given, int) else (pods[key].pod.priority if key is not None else 0)
                vs.append(Victim(uid, key, prio, i))
            out[node] = (vs, v.num_pdb_violations)
        return out

    # ------------------------------------------------------------------ choosing
    def lowest_priority(self) -> int | None:
        """The lowest priority any pod holding devices has (None: none holds any), recomputed only when
        the state changed: a backlog of pending pods retried while nothing changes costs no scan."""
        if self._lowest[0] != self.state.version:
            self._lowest = (self.state.version, min((r.pod.priority for k, r in self.state.pods.items()
                                                     if not is_claim_record(k)), default=None))
        return self._lowest[1]

    def choose(self, pod: PodRequest, nodes: list[str]) -> tuple[str, list[str]] | None:
        """The node and victims kube-scheduler would pick, or None when no node can be freed."""
        by_node: dict[str, list[tuple[int, str]]] = {}
        for key, rec in self.state.pods.items():
            # (DRA: a claim's record is no pod to evict: claim pods are not preempted, docs/dra.md)
            if rec.pod.priority < pod.priority and rec.phase == "bound" and not is_claim_record(key):
                by_node.setdefault(rec.allocation.node, []).append((rec.pod.priority, key))
        best: tuple[tuple[int, int, int], str, list[str]] | None = None
        tried = 0
        for node in nodes:
            lower = by_node.get(node)
            if not lower:
                continue
            tried += 1
            if tried > self.max_candidates:
                break
            needed = needed_victims(self.lifecycle, pod, node, [k for _, k in sorted(lower)])
            if not needed:
                continue
            prios = [self.state.pods[k].pod.priority for k in needed]
            rank = (max(prios), sum(prios), len(needed))
            if best is None or rank < best[0]:
                best = (rank, node, needed)
        return None if best is None else (best[1], best[2])

    def maybe_preempt(self, pod: PodRequest, failed_nodes: list[str]) -> Nomination | None:
        """Called when no node passed ``pod``'s filter: nominate a node and evict its victims."""
        if not pod.preempts or not failed_nodes or not self.leadership.may_write():
            return None
        lowest = self.lowest_priority()
        if lowest is None or lowest >= pod.priority:
            return None  # nobody it may evict
        now = self.clock()
        current = self.lifecycle.nominated(pod.key, pod.uid, now)
        if current is not None:
            return current  # victims already on their way out
        picked = self.choose(pod, failed_nodes)
        if picked is None:
            return None
        node, victims = picked
        nom = Nomination(pod.key, pod.uid, pod.priority, node, victims, now + self.ttl)
        self.lifecycle.nominate(nom)
        log.info("preempting for pod %s (priority %d) on node %s: %s", pod.key, pod.priority, node,
                 ", ".join(victims))
        task = asyncio.get_running_loop().create_task(self._evict(nom))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return nom

    # ------------------------------------------------------------------ evicting
    async def _evict(self, nom: Nomination) -> None:
        for key in nom.victims:
            rec = self.state.pods.get(key)
            uid = rec.pod.uid if rec is not None else ""
            ns, _, name = key.partition("/")
            if self._fenced(key, nom):
                return
            await self.events.record(pod_event(
                ns, name, uid, reason="Preempted", type_="Normal",
                message=f"Preempted by pod {nom.uid} on node {nom.node} (devshare: its GPU devices were needed)"))
            if self._fenced(key, nom):  # the lease may have lapsed while the event was written
                return
            try:
                await self.backend.delete_pod(ns, name, uid=uid or None)
                self.evicted += 1
            except NotFound:
                pass
            except BackendError as e:
                log.warning("could not delete pod %s to preempt it for %s: %s", key, nom.pod, e)

    def _fenced(self, key: str, nom: Nomination) -> bool:
        """Every write of an eviction is checked against the lease just before it is sent."""
        if self.leadership.may_write():
            return False
        log.warning("not preempting pod %s for %s: no longer the leader (or its lease may have expired)", key, nom.pod)
        return True
