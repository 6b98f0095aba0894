"""Pod groups and gangs in the extender (seed 003): the members that exist, and those the extender
must still bind.

The engine's :class:`~devshare.engine.groups.GroupPlanner` decides where a group goes (filter passes
the member's planned node, prioritize scores it highest, bind claims the planned devices;
the bind path is :mod:`devshare.server.extender.binding`). A group's plan holds devices only for pods
that exist (:meth:`Groups.missing`): a member the watch does not know yet is read from the API server
before its filter (:meth:`Groups.look_up`), and members that no longer exist give their places up
(:meth:`Groups.drop_missing`). Gang members bound in the state whose API binding failed wait in
:attr:`Groups.unbound` for the next /bind to retry them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from devshare.engine.groups import GroupPlanner, MemberPlacement
from devshare.engine.state import ClusterState
from devshare.kube.backend import Backend
from devshare.kube.errors import BackendError
from devshare.model.request import PodRequest
from devshare.server.extender.view import ClusterView

log = logging.getLogger(__name__)


class Groups:
    def __init__(self, planner: GroupPlanner, backend: Backend, cluster: ClusterView,
                 clock: Callable[[], float]) -> None:
        self.planner = planner
        self.state: ClusterState = planner.state
        self.backend = backend
        self.cluster = cluster
        self.clock = clock
        self.unbound: dict[str, MemberPlacement] = {}  # gang members bound in the state, API binding failed

    async def look_up(self, pod: PodRequest) -> None:
        """A group member the watch does not know yet (just created) is read from the API server, so
        that :meth:`missing` judges it as it is."""
        if pod.group is None or self.cluster.pod_exists(pod.key, pod.uid):
            return
        try:
            obj = await self.backend.get_pod(pod.namespace, pod.name)
        except BackendError as e:
            log.info("group member %s: cannot read it from the API server: %s", pod.key, e)
            return
        if obj is not None:
            self.cluster.note_pod(obj)

    def missing(self, pod: PodRequest) -> str | None:
        """Why a group's plan may not hold devices for ``pod`` (None when it exists)."""
        if self.cluster.pod_exists(pod.key, pod.uid):
            return None
        return (f"pod {pod.key} (uid {pod.uid or 'none given'}) does not exist in the API server: devshare plans "
                "a group only for pods that exist, and holds nothing for this one")

    def is_bound(self, key: str, node: str) -> bool:
        """The pod is a group member the extender bound to ``node`` itself (at its gang's quorum)."""
        rec = self.state.pods.get(key)
        return (rec is not None and rec.phase == "bound" and rec.pod.group is not None
                and rec.allocation.node == node)

    def deleted(self, key: str) -> None:
        """A deleted member gives up its place in its group's plan."""
        self.unbound.pop(key, None)
        if any(plan.slot_of(key) is not None for plan in self.planner.plans.values()):
            self.planner.forget(key)

    def drop_missing(self) -> list[str]:
        """Members of group plans whose pods no longer exist give their places up, and the plan of a
        group none of whose pods exists is dropped with every device it held. Returns what went."""
        gone = [m for plan in list(self.planner.plans.values()) for s in plan.slots
                if (m := s.member) is not None and not self.cluster.pod_exists(m, "")]
        for key in gone:
            self.deleted(key)
        plans = [k for k in list(self.planner.plans) if not self.cluster.group_exists(k) and self.planner.drop(k)]
        return gone + [f"the plan of group {k}" for k in plans]

    def expire(self) -> None:
        """Plans past their time release what they held; members that no longer exist give their places up."""
        if self.cluster.synced:
            gone = self.drop_missing()
            if gone:
                log.info("group members that no longer exist gave up their places: %s", ", ".join(gone))
        plans = self.planner.expire(self.clock())
        if plans:
            log.warning("group plans expired before their members bound (devices released): %s", ", ".join(plans))
