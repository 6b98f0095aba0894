"""Binding the members of groups and gangs (seed 003). The engine's :class:`GroupPlanner` decides
(bind now, wait for the gang, or refuse); at a gang's quorum every waiting member is bound here
too (annotations, then Binding), since kube-scheduler would only retry them later. A gang member
whose API binding fails stays bound in the state (the gang's decision stands) and is retried on the
next /bind; a plain group's member goes back to its planned devices."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from devshare.engine.groups import Bind, GroupPlanner, MemberPlacement
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.state import ClusterState
from devshare.kube.backend import Backend, meta
from devshare.kube.errors import BackendError
from devshare.model.annotations import encode_annotations
from devshare.model.request import PodRequest
from devshare.server.extender.writes import PodWrites

log = logging.getLogger(__name__)


class MemberBinds:
    def __init__(self, state: ClusterState, backend: Backend, planner: GroupPlanner, writes: PodWrites,
                 lifecycle: Lifecycle, clock: Callable[[], float]) -> None:
        self.state = state
        self.backend = backend
        self.planner = planner
        self.writes = writes
        self.lifecycle = lifecycle  # knows which pods have a bind in flight
        self.clock = clock
        self.unbound: dict[str, MemberPlacement] = {}  # gang members bound in the state, API binding failed

    def is_bound(self, key: str, node: str) -> bool:
        """The pod is a group member the extender bound to ``node`` itself (at its gang's quorum)."""
        rec = self.state.pods.get(key)
        return (rec is not None and rec.phase == "bound" and rec.pod.group is not None
                and rec.allocation.node == node)

    async def bind(self, pod: PodRequest, node: str, obj: dict[str, Any]) -> str:
        """A member's /bind: the answer is its own outcome; members bound with it are logged."""
        decision = self.planner.claim(pod, node, now=self.clock())
        if not isinstance(decision, Bind):
            return decision.reason
        answer = ""
        for m in decision.members:
            mine = m.pod == pod.key
            if mine:
                error = await self.bind_placed(m, obj)
            elif self.lifecycle.binding(m.pod):
                continue  # that member's own /bind is in flight: it binds it
            else:
                with self.lifecycle.bind_in_flight(m.pod):
                    error = await self.bind_placed(m)
            if mine:
                answer = error
            elif error:
                log.warning("gang member %s (bound with %s) could not be bound yet: %s", m.pod, pod.key, error)
        return answer

    async def bind_placed(self, m: MemberPlacement, obj: dict[str, Any] | None = None) -> str:
        """Write a member's annotations and create its Binding (the member is bound in the state)."""
        ns, _, name = m.pod.partition("/")
        rec = self.state.pods.get(m.pod)
        if rec is None or rec.phase != "bound" or rec.allocation != m.allocation:
            self.unbound.pop(m.pod, None)
            return f"pod {m.pod} no longer holds its planned devices"
        pod = rec.pod
        if obj is None:
            try:
                obj = await self.backend.get_pod(ns, name)
            except BackendError as e:
                return await self._failed(m, f"reading pod {m.pod} from the API server failed: {e}")
            if obj is None:
                self.unbound.pop(m.pod, None)
                self.planner.forget(m.pod)
                return f"pod {m.pod} not found"
            bound_to = (obj.get("spec") or {}).get("nodeName")
            if bound_to == m.node:
                self.unbound.pop(m.pod, None)
                return ""
            if bound_to:
                self.unbound.pop(m.pod, None)
                self.planner.forget(m.pod)
                return f"pod {m.pod} is already bound to node {bound_to}"
        annotations = encode_annotations(pod, m.allocation, now_ns=time.time_ns(),
                                         visible_gpus=list(m.visible_gpus),
                                         device_memory=self.state.gpu_memory(m.node))
        error = await self.writes.bind(ns, name, m.node, pod.uid, pod=pod, allocation=m.allocation,
                                       annotations=annotations,
                                       resource_version=str(meta(obj).get("resourceVersion") or "") or None)
        if error:
            return await self._failed(m, error)
        self.unbound.pop(m.pod, None)
        return ""

    async def _failed(self, m: MemberPlacement, error: str) -> str:
        if self.planner.bind_failed(m.pod, now=self.clock()):
            self.unbound.pop(m.pod, None)
        else:
            self.unbound[m.pod] = m
        return error

    async def retry_unbound(self) -> None:
        """Bind the gang members whose API binding failed after their gang reached its quorum."""
        for key, m in list(self.unbound.items()):
            if self.lifecycle.binding(key):
                continue
            with self.lifecycle.bind_in_flight(key):
                error = await self.bind_placed(m)
            if error:
                log.info("gang member %s: binding retried, still failing: %s", key, error)

    def deleted(self, key: str) -> None:
        """A deleted member gives up its place in its group's plan."""
        self.unbound.pop(key, None)
        if any(plan.slot_of(key) is not None for plan in self.planner.plans.values()):
            self.planner.forget(key)
