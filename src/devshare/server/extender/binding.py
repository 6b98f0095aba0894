"""The bind path: a pod's devices chosen and reserved, then its claim and one Binding written.

Bind is the only verb that awaits the API server. It picks the devices and *reserves* them in one
synchronous step (the lifecycle's ``bind`` hold), so a concurrent bind of another pod already sees them
taken; then it writes, and undoes the reservation if the writes fail. A reservation whose bind never
completes (the process stalled, the API server hung) expires after the lifecycle's TTL.

The writes (:meth:`Binder.write`): the leader fence (the Lease judged afresh), the pod's claim in the
claim ledger (:mod:`devshare.server.extender.claims`, when the extender keeps one), then one Binding
that carries the allocation annotations (the API server copies them onto the pod in the same write, so
a pod is never bound without its allocation nor annotated without being bound) and, as a precondition,
the resourceVersion of a read of the pod made *before* its claim was written: a claim that expires (its
pod never bound within the ledger's TTL) is released only after the pod is written to, so that such a
late Binding fails.

The pod is decided from the API server's object, never from a filter's body: the pending pod the watch
holds when it is the very pod kube-scheduler filtered (the same uid and resourceVersion), otherwise a
read of it. A group member's bind goes through the engine's group planner: at a gang's quorum every
waiting member is bound here too (a member whose Binding fails stays bound in the state and is retried
at the next /bind; a plain group's member goes back to its planned devices).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from devshare.engine.groups import Bind, MemberPlacement
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.records import Conflict
from devshare.kube.backend import Backend
from devshare.kube.errors import BackendError, Unavailable
from devshare.kube.errors import Conflict as Changed
from devshare.model.allocation import PodAllocation
from devshare.model.annotations import encode_annotations
from devshare.model.errors import InvalidInput
from devshare.model.kubeobjects import meta
from devshare.model.request import PodRequest
from devshare.server.extender.bindlog import BindLog
from devshare.server.extender.claims import Claims
from devshare.server.extender.filtering import Filtering
from devshare.server.extender.groups import Groups
from devshare.server.extender.requests import Requests, invalid_request, pod_id_of
from devshare.server.extender.view import ClusterView, Leadership

log = logging.getLogger(__name__)

NOT_LEADER = "not the leader"


class Binder:
    """``after_bind``: awaited after each Binding, before the bind is answered (``--save``: the cluster
    file written, :meth:`~devshare.kube.persist.SnapshotWriter.commit`); what it returns, when not None,
    is why the bind is not durable, and the answer says so. ``before_claim``: a test hook called with
    the pod's key after the fence and before the claim (the window a paused replica would be in).
    ``scheduler_name``: the kube-scheduler profile this extender serves: a pod asking for no device is
    bound only when it is that profile's (a caller cannot make devshare bind another scheduler's pods);
    None: any."""

    def __init__(self, lifecycle: Lifecycle, backend: Backend, cluster: ClusterView, leadership: Leadership,
                 requests: Requests, filtering: Filtering, groups: Groups, claims: Claims | None, *,
                 clock: Callable[[], float], after_bind: Callable[[], Awaitable[str | None]] | None = None,
                 before_claim: Callable[[str], None] | None = None, scheduler_name: str | None = None) -> None:
        self.lifecycle = lifecycle
        self.state = lifecycle.state
        self.backend = backend
        self.cluster = cluster
        self.leadership = leadership
        self.requests = requests
        self.filtering = filtering
        self.groups = groups
        self.claims = claims
        self.clock = clock
        self.after_bind = after_bind
        self.before_claim = before_claim
        self.scheduler_name = scheduler_name
        self.rereads = 0  # binds from the watched pod whose Binding met a changed pod: read and retried
        self.log = BindLog(clock)  # binds in the log: a DEBUG line each, an INFO summary now and then

    async def bind(self, ns: str, name: str, node: str, uid: str) -> str:
        """Bind the pod ``ns/name`` (of ``uid``, when given) to ``node``: "" when bound, else why not."""
        started = time.perf_counter()
        error = await self._bind(ns, name, node, uid)
        self.log.done(not error, time.perf_counter() - started)
        return error

    async def _bind(self, ns: str, name: str, node: str, uid: str) -> str:
        key = f"{ns}/{name}"
        if not self.leadership.may_write() and await self.leadership.check() is not None:
            # judged afresh before refusing: a follower's last read of its kube-scheduler's Lease may be
            # up to a second old, and kube-scheduler binds as soon as it holds the Lease
            return NOT_LEADER
        if self.lifecycle.binding(key):
            return f"pod {key}: a bind is already in progress"
        with self.lifecycle.bind_in_flight(key):
            if self.groups.unbound:
                await self._retry_unbound()
            watched = self._watched_pod(key, uid)
            if watched is not None:
                error, changed = await self._bind_from(watched, node, uid)
                if not changed:
                    return error
                self.rereads += 1  # the pod changed since the watch delivered it: read it once, decide again
            try:
                obj = await self.backend.get_pod(ns, name)
            except BackendError as e:
                return f"reading pod {key} from the API server failed: {e}"
            if obj is None:
                return f"pod {key} not found"
            return (await self._bind_from(obj, node, uid))[0]

    def _watched_pod(self, key: str, uid: str) -> dict[str, Any] | None:
        """The pending pod from the watch, when it is the very pod kube-scheduler scheduled: the same uid
        and resourceVersion as in the filter this extender answered for it. The Binding carries its
        resourceVersion, so a pod that changed since is not bound from it (a 409: read afresh)."""
        obj = self.cluster.pending_pod(key)
        if obj is None:
            return None
        seen = pod_id_of(obj)
        r = self.filtering.filtered.get(key)
        if r is None or not seen[1] or not seen[2] or r.pod_id != seen or (uid and uid != seen[1]):
            return None
        return obj

    async def _bind_from(self, obj: dict[str, Any], node: str, uid: str) -> tuple[str, bool]:
        """Bind ``obj`` (as the API server has it) to ``node``: the error ("" when bound) and whether the
        Binding failed on a precondition (409: the pod changed since)."""
        key, uid_now, version = pod_id_of(obj)
        if uid and uid_now and uid_now != uid:
            return f"pod {key} has uid {uid_now}, not {uid}: it was deleted and re-created", False
        bound_to = (obj.get("spec") or {}).get("nodeName")
        if bound_to:
            if bound_to == node and self.groups.is_bound(key, node):
                return "", False  # a group member the extender bound itself when its gang reached its quorum
            return f"pod {key} is already bound to node {bound_to}", False
        try:
            pod, _ = self.requests.from_api(obj)
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
            return await self._bind_member(pod, node, obj), False
        # ---- synchronous: choose and reserve (no await in between) ----
        stale = self.state.pods.get(key)
        alloc: PodAllocation | None = None
        if stale is not None:
            if stale.phase == "bound":
                return f"pod {key} already holds devices on node {stale.allocation.node}", False
            if stale.hold == "filter" and stale.allocation.node == node and stale.pod == pod:
                alloc = stale.allocation  # its filter's hold: the devices kube-scheduler was told of
            else:
                self.lifecycle.forget(key)  # a leftover reservation of an earlier attempt
        if alloc is None:
            r = self.filtering.filtered.get(key)
            # the filter's devices are reused only when it judged this very request
            evaluated = r.evaluation if r is not None and r.evaluation is not None and r.evaluation.pod == pod else None
            found = self.lifecycle.scheduler.allocate_on(pod, node, evaluated=evaluated)
            if isinstance(found, str):
                return f"pod {key} does not fit on node {node}: {found}", False
            alloc = found
            try:
                self.lifecycle.assume(pod, alloc, now=self.clock())
            except Conflict as e:
                return f"pod {key}: {e}", False
        annotations = encode_annotations(pod, alloc, now_ns=time.time_ns(), device_memory=self.state.gpu_memory(node))
        # ---- asynchronous: the writes ----
        written = False
        try:
            error, changed = await self.write(pod, node, alloc, annotations, version or None)
            if error:
                return error, changed
            written = True
        finally:
            if not written:
                self.lifecycle.forget(key, alloc)
        reason = self.lifecycle.confirm(pod, alloc)
        if reason is not None:
            log.warning("pod %s was bound after its reservation expired; its devices are now over-used: %s",
                        pod.key, reason)
        self.log.pod_bound(key, node, alloc)
        return "", False

    async def write(self, pod: PodRequest, node: str, alloc: PodAllocation, annotations: dict[str, str],
                    resource_version: str | None) -> tuple[str, bool]:
        """The fence, the claim, the Binding: the error ("" when written) and whether the Binding failed on
        a precondition (409 Conflict: the pod changed since it was read, or is bound already)."""
        fenced = await self.leadership.check()
        if fenced:
            return fenced, False
        if self.before_claim is not None:
            self.before_claim(pod.key)
        if self.claims is not None:
            refused = await self.claims.claim(pod, alloc)
            if refused:
                return refused, False
        try:
            await self.backend.bind_pod(pod.namespace, pod.name, node, uid=pod.uid or None, annotations=annotations,
                                        resource_version=resource_version)
        except BackendError as e:
            # the claim is given back; when the connection broke the Binding may have been written:
            # the pod is written to first (a Binding still on its way then fails) and checked
            if self.claims is not None:
                await self.claims.withdraw(pod, alloc, unsure=isinstance(e, Unavailable))
            return f"binding pod {pod.key} to node {node} failed: {e}", isinstance(e, Changed)
        if self.after_bind is not None:
            unsaved = await self.after_bind()
            if unsaved:
                return (f"pod {pod.key} is bound to node {node} in memory but not saved to the cluster file: "
                        f"{unsaved}"), False
        return "", False

    # ------------------------------------------------------------------ group members
    async def _bind_member(self, pod: PodRequest, node: str, obj: dict[str, Any]) -> str:
        """A member's /bind: the answer is its own outcome; members bound with it are logged."""
        decision = self.groups.planner.claim(pod, node, now=self.clock())
        if not isinstance(decision, Bind):
            return decision.reason
        answer = ""
        for m in decision.members:
            if m.pod == pod.key:
                answer = await self._bind_placed(m, obj)
                continue
            if self.lifecycle.binding(m.pod):
                continue  # that member's own /bind is in flight: it binds it
            with self.lifecycle.bind_in_flight(m.pod):
                error = await self._bind_placed(m)
            if error:
                log.warning("gang member %s (bound with %s) could not be bound yet: %s", m.pod, pod.key, error)
        return answer

    async def _bind_placed(self, m: MemberPlacement, obj: dict[str, Any] | None = None) -> str:
        """Write a member's annotations and create its Binding (the member is bound in the state)."""
        ns, _, name = m.pod.partition("/")
        rec = self.state.pods.get(m.pod)
        planner, unbound = self.groups.planner, self.groups.unbound
        if rec is None or rec.phase != "bound" or rec.allocation != m.allocation:
            unbound.pop(m.pod, None)
            return f"pod {m.pod} no longer holds its planned devices"
        if obj is None:
            try:
                obj = await self.backend.get_pod(ns, name)
            except BackendError as e:
                return self._member_failed(m, f"reading pod {m.pod} from the API server failed: {e}")
            if obj is None:
                unbound.pop(m.pod, None)
                planner.forget(m.pod)
                return f"pod {m.pod} not found"
            bound_to = (obj.get("spec") or {}).get("nodeName")
            if bound_to:
                unbound.pop(m.pod, None)
                if bound_to == m.node:
                    return ""
                planner.forget(m.pod)
                return f"pod {m.pod} is already bound to node {bound_to}"
        annotations = encode_annotations(rec.pod, m.allocation, now_ns=time.time_ns(),
                                         visible_gpus=list(m.visible_gpus), device_memory=self.state.gpu_memory(m.node))
        error, _ = await self.write(rec.pod, m.node, m.allocation, annotations,
                                    str(meta(obj).get("resourceVersion") or "") or None)
        if error:
            return self._member_failed(m, error)
        unbound.pop(m.pod, None)
        self.log.pod_bound(m.pod, m.node, m.allocation)
        return ""

    def _member_failed(self, m: MemberPlacement, error: str) -> str:
        if self.groups.planner.bind_failed(m.pod, now=self.clock()):
            self.groups.unbound.pop(m.pod, None)
        else:
            self.groups.unbound[m.pod] = m
        return error

    async def _retry_unbound(self) -> None:
        """Bind the gang members whose API binding failed after their gang reached its quorum."""
        for key, m in list(self.groups.unbound.items()):
            if self.lifecycle.binding(key):
                continue
            with self.lifecycle.bind_in_flight(key):
                error = await self._bind_placed(m)
            if error:
                log.info("gang member %s: binding retried, still failing: %s", key, error)
