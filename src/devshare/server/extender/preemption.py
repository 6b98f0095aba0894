"""GPU preemption, driven by the extender itself.

kube-scheduler cannot preempt for devices it does not see. Its DefaultPreemption plugin (v1.37,
``SelectVictimsOnNode``) removes the lower-priority pods of a node, then gives each back while the
preemptor still passes kube-scheduler's *own* filter plugins; devshare's resources are ignored by
its resource fit (``ignoredResources``), so every victim is given back, the node has no victims and is
dropped ("expected at least one victim pod"), and the extender's ``/preempt`` is never asked. So a
high-priority GPU pod would stay pending forever behind low-priority GPU pods.

The extender therefore preempts itself, the way kube-scheduler would:

1. When a filter finds no node for a pod that may preempt (``preemptionPolicy`` is not ``Never``)
   and some nodes failed only because their devices are in use, each such node (at most
   ``max_candidates``) is asked for the fewest lower-priority pods whose devices would make room
   (:func:`~devshare.server.extender.preempt.needed_victims`: lowest priority first, then every
   victim the pod fits without is spared).
2. Of those nodes, the one kube-scheduler's ``pickOneNodeForPreemption`` would choose: the lowest
   highest victim priority, then the smallest sum of priorities, then the fewest victims.
3. The node is *nominated* for the pod: until the pod binds, is deleted, or ``ttl`` seconds pass,
   the filter of a pod of lower priority does not pass that node, so the freed devices wait for the
   preemptor (kube-scheduler's nominated pods do the same for CPU and memory).
4. The victims get a ``Preempted`` event (as kube-scheduler writes it) and are deleted with their
   own grace period. Their deletion reaches the state through the watch; kube-scheduler retries the
   pending pod on the deletion events and its filter then passes the nominated node.

A nomination is made once: a pod that stays unschedulable while its victims terminate does not
evict more pods until its nomination lapses. Only the leader preempts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from devshare.engine.scheduler import Scheduler
from devshare.kube.backend import Backend
from devshare.kube.errors import BackendError, NotFound
from devshare.model.dra import is_claim_record
from devshare.model.request import PodRequest
from devshare.server.extender.preempt import needed_victims

log = logging.getLogger(__name__)

NOMINATION_TTL = 60.0
MAX_CANDIDATES = 100  # kube-scheduler's default: at most 100 candidate nodes (minCandidateNodesAbsolute)


@dataclass
class Nomination:
    pod: str  # ns/name of the preemptor
    uid: str
    priority: int
    node: str
    victims: list[str]
    expires_at: float


@dataclass
class Preemptor:
    scheduler: Scheduler
    backend: Backend
    clock: Callable[[], float]
    is_leader: Callable[[], bool] = lambda: True
    ttl: float = NOMINATION_TTL
    max_candidates: int = MAX_CANDIDATES
    nominations: dict[str, Nomination] = field(default_factory=dict)  # preemptor key -> nomination
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    evicted: int = 0
    _lowest: tuple[int, int | None] = (-1, None)  # (state version, lowest priority of any pod record)

    # ------------------------------------------------------------------ nominated nodes
    def held_nodes(self, pod: PodRequest) -> dict[str, str]:
        """Nodes nominated for a pending pod of higher priority than ``pod``: not for ``pod``."""
        if not self.nominations:
            return {}
        now = self.clock()
        out: dict[str, str] = {}
        for key, nom in list(self.nominations.items()):
            if nom.expires_at <= now:
                del self.nominations[key]
            elif key != pod.key and nom.priority > pod.priority:
                out[nom.node] = f"devices freed by preemption for pod {key} (priority {nom.priority})"
        return out

    def done(self, key: str) -> None:
        """The preemptor was bound or deleted: its node is nobody's any more."""
        self.nominations.pop(key, None)

    # ------------------------------------------------------------------ choosing
    def lowest_priority(self) -> int | None:
        """The lowest priority any pod holding devices has (None: none holds any), recomputed only
        when the state changed: a backlog of pending pods retried while nothing changes, or a cluster
        where every pod has the same priority, costs no scan per filter."""
        state = self.scheduler.state
        if self._lowest[0] != state.version:
            self._lowest = (state.version, min((r.pod.priority for k, r in state.pods.items()
                                                if not is_claim_record(k)), default=None))
        return self._lowest[1]

    def choose(self, pod: PodRequest, nodes: list[str]) -> tuple[str, list[str]] | None:
        """The node and victims kube-scheduler would pick, or None when no node can be freed."""
        state = self.scheduler.state
        by_node: dict[str, list[tuple[int, str]]] = {}
        for key, rec in state.pods.items():
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
            keys = [k for _, k in sorted(lower)]
            needed = needed_victims(self.scheduler, pod, node, keys)
            if not needed:
                continue
            prios = [state.pods[k].pod.priority for k in needed]
            rank = (max(prios), sum(prios), len(needed))
            if best is None or rank < best[0]:
                best = (rank, node, needed)
        return None if best is None else (best[1], best[2])

    def maybe_preempt(self, pod: PodRequest, failed_nodes: list[str]) -> Nomination | None:
        """Called when no node passed ``pod``'s filter: nominate a node and evict its victims."""
        if not pod.preempts or not failed_nodes or not self.is_leader():
            return None
        lowest = self.lowest_priority()
        if lowest is None or lowest >= pod.priority:
            return None  # nobody it may evict
        now = self.clock()
        current = self.nominations.get(pod.key)
        if current is not None and current.uid == pod.uid and current.expires_at > now:
            return current  # victims already on their way out
        picked = self.choose(pod, failed_nodes)
        if picked is None:
            return None
        node, victims = picked
        nom = Nomination(pod.key, pod.uid, pod.priority, node, victims, now + self.ttl)
        self.nominations[pod.key] = nom
        log.info("preempting for pod %s (priority %d) on node %s: %s", pod.key, pod.priority, node,
                 ", ".join(victims))
        task = asyncio.get_running_loop().create_task(self._evict(nom))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return nom

    # ------------------------------------------------------------------ evicting
    async def _evict(self, nom: Nomination) -> None:
        for key in nom.victims:
            rec = self.scheduler.state.pods.get(key)
            uid = rec.pod.uid if rec is not None else ""
            ns, _, name = key.partition("/")
            if self._fenced(key, nom):
                return
            try:
                await self.backend.record_event(ns, _event(ns, name, uid, nom))
            except BackendError as e:
                log.info("could not record the Preempted event of %s: %s", key, e)
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
        if self.is_leader():
            return False
        log.warning("not preempting pod %s for %s: no longer the leader (or its lease may have expired)", key, nom.pod)
        return True


def _event(ns: str, name: str, uid: str, nom: Nomination) -> dict[str, Any]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": ns},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name, "uid": uid},
        "reason": "Preempted", "type": "Normal",
        "message": f"Preempted by pod {nom.uid} on node {nom.node} (devshare: its GPU devices were needed)",
        "source": {"component": "devshare-extender"}, "reportingComponent": "devshare-extender",
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }
