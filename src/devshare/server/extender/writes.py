"""What a bind writes to the API server: the pod's claim in the claim ledger
(:mod:`devshare.server.extender.claims`, when the extender keeps one), then one Binding that carries
the allocation annotations (the API server copies them onto the pod in the same write, so a pod is
never bound without its allocation nor annotated without being bound). Returns an error text ("" when
it worked) that the extender passes on to kube-scheduler.

The Binding's ``resource_version`` must come from a read of the pod made before the claim is written:
a claim that expires (its pod never bound within the ledger's TTL) is released only after the pod is
written to, so that such a late Binding fails."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from devshare.kube.backend import Backend
from devshare.kube.errors import BackendError, Conflict, Unavailable
from devshare.model.allocation import PodAllocation
from devshare.model.request import PodRequest
from devshare.server.extender.claims import Claims

log = logging.getLogger(__name__)


class PodWrites:
    def __init__(self, backend: Backend, after_bind: Callable[[], None] | None = None) -> None:
        self.backend = backend
        self.after_bind = after_bind  # e.g. save the --cluster file
        # leader fencing (LeaderElector.check, LeaseFollower.check): why this replica may not write
        # now, or None; awaited just before the writes go out (after every other await of the bind)
        self.fence: Callable[[], Awaitable[str | None]] | None = None
        self.claims: Claims | None = None  # the claim ledger, written before each Binding
        # test hook (serve.py, $DEVSHARE_TEST_SIGSTOP_BEFORE_CLAIM): called with the pod's key after the
        # fence and before the claim, the window a paused replica would be in
        self.before_claim: Callable[[str], None] | None = None

    async def bind(self, ns: str, name: str, node: str, uid: str, *, pod: PodRequest, allocation: PodAllocation,
                   annotations: dict[str, str] | None = None, resource_version: str | None = None) -> str:
        """``pod``'s claim on ``allocation``, then the Binding, carrying the allocation ``annotations``
        (the API server writes both at once) and the pod's ``resource_version`` as a precondition: a
        pod that changed since it was read (e.g. a user wrote an allocation of their own) is not bound."""
        error, _ = await self.try_bind(ns, name, node, uid, pod=pod, allocation=allocation, annotations=annotations,
                                       resource_version=resource_version)
        return error

    async def try_bind(self, ns: str, name: str, node: str, uid: str, *, pod: PodRequest, allocation: PodAllocation,
                       annotations: dict[str, str] | None = None, resource_version: str | None = None
                       ) -> tuple[str, bool]:
        """:meth:`bind`, and whether it failed on a precondition (409 Conflict: the pod changed since
        it was read, or is bound already), which reading the pod afresh may resolve."""
        fenced = await self.fence() if self.fence is not None else None
        if fenced:
            return fenced, False
        if self.before_claim is not None:
            self.before_claim(f"{ns}/{name}")
        if self.claims is not None:
            refused = await self.claims.claim(pod, allocation)
            if refused:
                return refused, False
        try:
            await self.backend.bind_pod(ns, name, node, uid=uid or None, annotations=annotations,
                                        resource_version=resource_version)
        except BackendError as e:
            # the claim is given back; when the connection broke the Binding may have been written:
            # the pod is written to first (a Binding still on its way then fails) and checked
            if self.claims is not None:
                await self.claims.withdraw(pod, allocation, unsure=isinstance(e, Unavailable))
            return f"binding pod {ns}/{name} to node {node} failed: {e}", isinstance(e, Conflict)
        if self.after_bind is not None:
            self.after_bind()
        return "", False
