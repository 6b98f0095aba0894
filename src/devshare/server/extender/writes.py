"""What a bind writes to the API server: one Binding that carries the allocation annotations (the API
server copies them onto the pod in the same write, so a pod is never bound without its allocation
nor annotated without being bound). Returns an error text ("" when it worked) that the extender
passes on to kube-scheduler."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from devshare.kube.backend import Backend
from devshare.kube.errors import BackendError, Conflict

log = logging.getLogger(__name__)


class PodWrites:
    def __init__(self, backend: Backend, after_bind: Callable[[], None] | None = None) -> None:
        self.backend = backend
        self.after_bind = after_bind  # e.g. save the --cluster file
        # leader fencing (LeaderElector.check, LeaseFollower.check): why this replica may not write
        # now, or None; awaited just before the write goes out (after every other await of the bind)
        self.fence: Callable[[], Awaitable[str | None]] | None = None

    async def bind(self, ns: str, name: str, node: str, uid: str, *, annotations: dict[str, str] | None = None,
                   resource_version: str | None = None) -> str:
        """The Binding, carrying the allocation ``annotations`` (the API server writes both at once)
        and the pod's ``resource_version`` as a precondition: a pod that changed since it was read
        (e.g. a user wrote an allocation of their own) is not bound."""
        error, _ = await self.try_bind(ns, name, node, uid, annotations=annotations, resource_version=resource_version)
        return error

    async def try_bind(self, ns: str, name: str, node: str, uid: str, *, annotations: dict[str, str] | None = None,
                       resource_version: str | None = None) -> tuple[str, bool]:
        """:meth:`bind`, and whether it failed on a precondition (409 Conflict: the pod changed since
        it was read, or is bound already), which reading the pod afresh may resolve."""
        fenced = await self.fence() if self.fence is not None else None
        if fenced:
            return fenced, False
        try:
            await self.backend.bind_pod(ns, name, node, uid=uid or None, annotations=annotations,
                                        resource_version=resource_version)
        except BackendError as e:
            return f"binding pod {ns}/{name} to node {node} failed: {e}", isinstance(e, Conflict)
        if self.after_bind is not None:
            self.after_bind()
        return "", False
