"""What DRA needs from the API server, as a narrow interface (:class:`DraApi`) and its implementation
over the extender's API requests (:class:`devshare.kube.rest.ApiRequests`: aiohttp).

The allocator (:mod:`devshare.server.dra`) and the slice publishers use only these verbs, so they
move onto another client by implementing this protocol again. Paths are built by :func:`path_of`,
which checks every name as a Kubernetes name and quotes it.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol
from urllib.parse import quote, urlencode

from devshare.kube.backend import ListResult, WatchEvent, meta
from devshare.kube.errors import BackendError
from devshare.kube.rest import ApiRequests

DraKind = Literal["resourceslices", "resourceclaims", "deviceclasses", "resourceclaimtemplates", "pods"]
DRA_KINDS: tuple[DraKind, ...] = ("deviceclasses", "resourceslices", "resourceclaims", "pods")
_BASE = {"resourceslices": "/apis/resource.k8s.io/v1", "resourceclaims": "/apis/resource.k8s.io/v1",
         "deviceclasses": "/apis/resource.k8s.io/v1", "resourceclaimtemplates": "/apis/resource.k8s.io/v1",
         "pods": "/api/v1"}
_NAMESPACED = {"resourceclaims", "resourceclaimtemplates", "pods"}
# the pods the allocator follows: not yet bound (a gated pod is never bound)
PENDING_PODS = "spec.nodeName="
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
PAGE = 500


def path_of(kind: DraKind, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
    """The API path of a collection or an object; names are checked, then quoted."""
    for what, v in (("namespace", namespace), ("name", name)):
        if v is not None and not _NAME.match(v):
            raise BackendError(f"{what} {v!r} is not a Kubernetes name")
    p = _BASE[kind]
    if namespace is not None and kind in _NAMESPACED:
        p += f"/namespaces/{quote(namespace, safe='')}"
    p += f"/{kind}"
    if name is not None:
        p += f"/{quote(name, safe='')}"
        if sub:
            p += f"/{sub}"
    return p


class DraApi(Protocol):
    async def list(self, kind: DraKind) -> ListResult:
        """Every object of ``kind`` (pods: only those not bound yet), and where a watch continues."""
        ...

    def watch(self, kind: DraKind, resource_version: str) -> AsyncIterator[WatchEvent]:
        ...

    async def get(self, kind: DraKind, namespace: str | None, name: str) -> dict[str, Any] | None:
        ...

    async def update_status(self, claim: dict[str, Any]) -> dict[str, Any]:
        """PUT a ResourceClaim's status; its metadata.resourceVersion is the precondition (Conflict)."""
        ...

    async def update(self, kind: DraKind, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT an object (a pod whose scheduling gate is lifted, a ResourceSlice); resourceVersion checked."""
        ...

    async def create(self, kind: DraKind, obj: dict[str, Any]) -> dict[str, Any]:
        ...

    async def delete(self, kind: DraKind, namespace: str | None, name: str) -> None:
        ...

    async def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        ...


class LiveDraApi:
    """:class:`DraApi` over :class:`ApiRequests`. ``watch_timeout``: seconds a watch request stays open."""

    def __init__(self, api: ApiRequests, *, watch_timeout: int = 300) -> None:
        self.api = api
        self.watch_timeout = watch_timeout

    @staticmethod
    def _query(kind: DraKind) -> dict[str, str]:
        return {"fieldSelector": PENDING_PODS} if kind == "pods" else {}

    async def list(self, kind: DraKind) -> ListResult:
        items: list[dict[str, Any]] = []
        cont = ""
        while True:
            q = {**self._query(kind), "limit": str(PAGE)}
            if cont:
                q["continue"] = cont
            page = await self.api.get(f"{path_of(kind)}?{urlencode(q)}")
            if page is None:
                raise BackendError(f"{path_of(kind)}: the API server does not serve it (is resource.k8s.io/v1 on?)")
            items.extend(page.get("items") or [])
            m = meta(page)
            cont = str(m.get("continue") or "")
            if not cont:
                return ListResult(items, str(m.get("resourceVersion") or ""))

    def watch(self, kind: DraKind, resource_version: str) -> AsyncIterator[WatchEvent]:
        q = self._query(kind)
        path = path_of(kind) + (f"?{urlencode(q)}" if q else "")
        return self.api.watch(path, resource_version, server_timeout=self.watch_timeout)

    async def get(self, kind: DraKind, namespace: str | None, name: str) -> dict[str, Any] | None:
        return await self.api.get(path_of(kind, namespace, name))

    async def update_status(self, claim: dict[str, Any]) -> dict[str, Any]:
        m = meta(claim)
        return await self.api.send("PUT", path_of("resourceclaims", m.get("namespace"), m["name"], "status"), claim)

    async def update(self, kind: DraKind, obj: dict[str, Any]) -> dict[str, Any]:
        m = meta(obj)
        return await self.api.send("PUT", path_of(kind, m.get("namespace"), m["name"]), obj)

    async def create(self, kind: DraKind, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.api.send("POST", path_of(kind, meta(obj).get("namespace")), obj)

    async def delete(self, kind: DraKind, namespace: str | None, name: str) -> None:
        await self.api._call("DELETE", path_of(kind, namespace, name))  # no public DELETE on ApiRequests yet

    async def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        await self.api.send("POST", f"/api/v1/namespaces/{quote(namespace, safe='')}/events", event)
