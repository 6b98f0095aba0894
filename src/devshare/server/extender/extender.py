"""The extender: kube-scheduler's four verbs over the engine, each handed to the part that owns it (the
HTTP routes call :attr:`Extender.filtering` for filter and prioritize, the extender for bind and preempt).

- :mod:`~devshare.server.extender.requests`: a verb's pod and candidate nodes, read once (caches);
- :mod:`~devshare.server.extender.filtering`: filter and prioritize, with the holds a filter leaves;
- :mod:`~devshare.server.extender.binding`: the bind path (the reservation, the claim, the Binding);
- :mod:`~devshare.server.extender.preemption`: ``/preempt``, and preemption driven by the extender;
- :mod:`~devshare.server.extender.groups`: group members that exist, gang members to bind again;
- :mod:`~devshare.server.extender.requeue`: pods refused for devices in use, nudged when some free up;
- :mod:`~devshare.server.extender.refused`: the pods refused lately and why (what ``/ui``'s queue shows).

Every engine call is synchronous and made on the event loop's thread, so two requests never interleave
inside the engine. The cluster is read through one :class:`~devshare.server.extender.view.ClusterView`
(the informer's engine half); the one cache of devices and timed holds is the engine's
:class:`~devshare.engine.lifecycle.Lifecycle`. Before the informer's first list is in, filter and bind
answer ``not ready`` and prioritize and preempt raise :class:`NotReady` (a 503).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from devshare.engine.groups import GroupPlanner
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.refusals import Refusals
from devshare.kube.backend import Backend
from devshare.model import names
from devshare.model.kubeobjects import meta, object_key
from devshare.server.extender.binding import Binder
from devshare.server.extender.claims import Claims
from devshare.server.extender.claimsweep import ClaimSweep
from devshare.server.extender.events import Events
from devshare.server.extender.filtering import NOT_READY, Filtering, NotReady
from devshare.server.extender.groups import Groups
from devshare.server.extender.metrics import ExtenderMetrics
from devshare.server.extender.preemption import Preemption
from devshare.server.extender.refused import RefusalLog
from devshare.server.extender.requests import Requests
from devshare.server.extender.requeue import Requeue
from devshare.server.extender.verdicts import event_safe
from devshare.server.extender.view import ClusterView, Leadership, Unelected
from devshare.server.extender.wire import (
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
)

log = logging.getLogger(__name__)

class Extender:
    def __init__(self, lifecycle: Lifecycle, backend: Backend, cluster: ClusterView, *,
                 leadership: Leadership | None = None, metrics: ExtenderMetrics | None = None,
                 refusals: Refusals | None = None, claims: Claims | None = None, events: Events | None = None,
                 shortlist: int = 0, clock: Callable[[], float] = time.monotonic,
                 after_bind: Callable[[], Awaitable[str | None]] | None = None,
                 before_claim: Callable[[str], None] | None = None,
                 scheduler_name: str | None = None, wall_clock: Callable[[], float] = time.time) -> None:
        self.lifecycle = lifecycle
        self.state = lifecycle.state
        self.cluster = cluster
        self.leadership = leadership or Unelected()
        self.metrics = metrics or ExtenderMetrics()
        self.clock = clock
        self.claims = claims
        self.sweep = ClaimSweep(claims) if claims is not None else None
        self.refused = RefusalLog(wall_clock)  # the pods refused lately and why (/ui's queue)
        self.requests = Requests(self.state, cluster, refusals or Refusals())
        self.groups = Groups(GroupPlanner(lifecycle.scheduler, lifecycle=lifecycle), backend, cluster, clock)
        self.preemption = Preemption(lifecycle, backend, self.leadership, events or Events(backend),
                                     parse=self.requests.parse, clock=clock)
        self.requeue = Requeue(backend, cluster, self.leadership)
        self.filtering = Filtering(lifecycle, cluster, self.requests, self.groups, self.preemption, self.requeue,
                                   self.metrics, self.refused, shortlist=shortlist, clock=clock)
        self.binder = Binder(lifecycle, backend, cluster, self.leadership, self.requests, self.filtering, self.groups,
                             claims, clock=clock, after_bind=after_bind, before_claim=before_claim,
                             scheduler_name=scheduler_name)

    @property
    def is_synced(self) -> bool:
        return self.cluster.synced

    # ------------------------------------------------------------------ the verbs
    async def bind(self, args: ExtenderBindingArgs) -> ExtenderBindingResult:
        key = f"{args.pod_namespace}/{args.pod_name}"
        error = NOT_READY if not self.is_synced else event_safe(
            await self.binder.bind(args.pod_namespace, args.pod_name, args.node, args.pod_uid))
        if error:
            self.metrics.fail("bind", [error])
            log.info("bind %s to %s refused: %s", key, args.node, error)
            self.refused.refused(key, "bind", f"{args.node}: {error}")
        else:
            self.requeue.forget(key)
            self.refused.forget(key)
        return ExtenderBindingResult(error=error)

    def preempt(self, args: ExtenderPreemptionArgs) -> ExtenderPreemptionResult:
        if not self.is_synced:
            raise NotReady(NOT_READY)
        return self.preemption.preempt(args)

    # ------------------------------------------------------------------ what the informer delivers
    def listed(self, kind: str, items: list[dict[str, Any]], *, initial: bool) -> list[str]:
        """After the state applied a list: the claims learn which of devshare's pods are bound, as from the
        watch (after a restart, the claims of pods bound meanwhile then leave the ledger). Only pods with
        devshare's allocation can have a claim: the others would only crowd the claims' memory of them."""
        if kind == "pods" and self.claims is not None:
            for obj in items:
                if names.ALLOCATION in (meta(obj).get("annotations") or {}):
                    self.claims.pod_changed("ADDED", obj)
        return []

    def progressed(self, kind: str, version: str, *, synced: bool) -> None:
        pass

    def changed(self, kind: str, type_: str, obj: dict[str, Any]) -> None:
        """After the state applied a watch event: the claims learn which claimed pods are bound; a pending
        pod of this scheduler has its request read now, while nothing waits on it, rather than in its
        filter; freed devices nudge the pods refused for lack of them; a deleted group member gives up
        its place in its group's plan."""
        if kind == "pods":
            key = object_key(obj)
            if self.claims is not None:
                self.claims.pod_changed(type_, obj)
            if type_ != "DELETED" and self.is_synced and self.cluster.pending_pod(key) is obj:
                self.requests.judged_from_api(obj)
            if type_ == "DELETED" or (obj.get("spec") or {}).get("nodeName"):
                self.refused.forget(key)  # deleted or placed: no longer waiting
            if type_ == "DELETED":
                self.groups.deleted(key)
                if self.groups.planner.plans:
                    self.groups.drop_missing()
        self.requeue.changed(kind, type_, obj)

    # ------------------------------------------------------------------ expiry
    def expire(self) -> list[str]:
        """Drop the timed holds past their deadline (not those with a bind in flight): group plans and
        members that no longer exist, reservations, filter holds, nominations."""
        self.groups.expire()
        gone = self.lifecycle.expire(self.clock())
        if gone:
            log.warning("reservations expired without a bind: %s", ", ".join(gone))
        return gone

    async def sweep_claims(self) -> None:
        """The claim ledger's upkeep (:mod:`~devshare.server.extender.claimsweep`), the leader's pruning."""
        if self.sweep is not None and self.is_synced:
            await self.sweep.sweep(leading=self.leadership.may_write())
