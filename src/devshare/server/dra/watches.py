"""The DRA controller's informers: each kind of :data:`~devshare.kube.dra.DRA_KINDS` listed, then
watched from the list's resourceVersion; a 410 Gone re-lists (objects no longer listed are delivered
as DELETED), a broken watch reconnects after a backoff. Every object goes to one ``apply`` callback."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from devshare.kube.dra import DRA_KINDS, DraApi, DraKind
from devshare.kube.errors import BackendError, Gone, NotFound, Unavailable
from devshare.kube.informer import Backoff
from devshare.model.kubeobjects import meta, object_key

log = logging.getLogger("devshare.server.dra.controller")

Apply = Callable[[DraKind, str, dict[str, Any]], None]  # kind, event type, object


class DraWatches:
    def __init__(self, api: DraApi, apply: Apply, held: Callable[[DraKind], dict[str, dict[str, Any]]],
                 *, backoff: Callable[[], Backoff] = Backoff) -> None:
        self.api = api
        self.apply = apply
        self.held = held  # kind -> the objects of that kind as last delivered (for a re-list's DELETEDs)
        self._backoff = backoff
        self.versions: dict[DraKind, str] = {}

    async def list_all(self) -> str:
        """The first list of every kind; "" when done, else why DRA is off: a cluster before Kubernetes
        1.34 serves no resource.k8s.io/v1, or deploy/dra (the DeviceClasses and the allocator's RBAC) is
        not installed: nothing to allocate until a restart after it is."""
        try:
            for kind in DRA_KINDS:
                await self.list(kind, initial=True)
        except BackendError as e:
            why = ("the API server does not serve resource.k8s.io/v1: claims need Kubernetes 1.34 or later"
                   if isinstance(e, NotFound) else
                   "its RBAC is not installed (kubectl apply -k deploy/dra, or the chart's dra.enabled), then restart")
            return f"{why}; {e}"
        return ""

    async def list(self, kind: DraKind, *, initial: bool) -> None:
        """List ``kind`` and deliver what changed. The first list raises NotFound or 403 (the API group
        is not served, or DRA's RBAC not installed); later ones retry until they succeed."""
        backoff = self._backoff()
        while True:
            try:
                result = await self.api.list(kind)
                break
            except BackendError as e:
                if initial and (isinstance(e, NotFound) or e.code == 403):
                    raise
                delay = backoff.next_delay()
                log.warning("listing %s failed (%s); retrying in %.1fs", kind, e, delay)
                await asyncio.sleep(delay)
        if not initial:
            present = {object_key(o) for o in result.items}
            held = self.held(kind)
            for k in [k for k in held if k not in present]:
                self.apply(kind, "DELETED", held.get(k) or {"metadata": {"name": k}})
        for obj in result.items:
            self.apply(kind, "ADDED", obj)
        self.versions[kind] = result.resource_version

    async def watch(self, kind: DraKind) -> None:
        backoff = self._backoff()
        while True:
            try:
                async for ev in self.api.watch(kind, self.versions.get(kind, "")):
                    backoff.reset()
                    if ev.type != "BOOKMARK":
                        self.apply(kind, ev.type, ev.object)
                    rv = meta(ev.object).get("resourceVersion")
                    if rv:
                        self.versions[kind] = str(rv)
            except Gone:
                log.warning("DRA watch of %s: history compacted; re-listing", kind)
                await self.list(kind, initial=False)
            except BackendError as e:
                delay = backoff.next_delay()
                level = logging.INFO if isinstance(e, Unavailable) else logging.WARNING
                log.log(level, "DRA watch of %s broke (%s); reconnecting in %.1fs", kind, e, delay)
                await asyncio.sleep(delay)
            except Exception:
                delay = backoff.next_delay()
                log.exception("DRA watch of %s failed unexpectedly; reconnecting in %.1fs", kind, delay)
                await asyncio.sleep(delay)


def keys(objs: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Keys alone (DeviceClasses are held parsed): each delivered as DELETED by its name."""
    return {k: {"metadata": {"name": k}} for k in objs}
