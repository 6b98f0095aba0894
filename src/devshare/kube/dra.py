"""What DRA needs from the API server, as a narrow interface (:class:`DraApi`) and its implementation
over the one API client (:class:`devshare.kube.rest.KubeClient`).

The allocator (:mod:`devshare.server.dra`) and the slice publishers use only these verbs, so they
move onto another client by implementing this protocol again. Paths are built by
:func:`devshare.kube.rest.api_path`, which checks every name as a Kubernetes name and quotes it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

from devshare.kube.backend import ListResult, WatchEvent
from devshare.kube.errors import NotFound
from devshare.kube.rest import PODS, KubeClient, Resource, api_path
from devshare.model.kubeobjects import meta

DraKind = Literal["resourceslices", "resourceclaims", "deviceclasses", "resourceclaimtemplates", "pods"]
DRA_KINDS: tuple[DraKind, ...] = ("deviceclasses", "resourceslices", "resourceclaims", "pods")
RESOURCES: dict[DraKind, Resource] = {
    "resourceslices": Resource("resource.k8s.io/v1", "resourceslices", False),
    "resourceclaims": Resource("resource.k8s.io/v1", "resourceclaims", True),
    "deviceclasses": Resource("resource.k8s.io/v1", "deviceclasses", False),
    "resourceclaimtemplates": Resource("resource.k8s.io/v1", "resourceclaimtemplates", True),
    "pods": PODS,
}
# the pods the allocator follows: not yet bound (a gated pod is never bound)
PENDING_PODS = "spec.nodeName="


def path_of(kind: DraKind, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
    """The API path of a collection (every namespace's when ``namespace`` is None) or of an object
    (:func:`~devshare.kube.rest.api_path`: names checked, every segment quoted)."""
    resource = RESOURCES[kind]
    return api_path(resource, namespace=namespace if resource.namespaced else None, name=name, subresource=sub)


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
    """:class:`DraApi` over :class:`KubeClient`."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    @staticmethod
    def _query(kind: DraKind) -> dict[str, str]:
        return {"fieldSelector": PENDING_PODS} if kind == "pods" else {}

    async def list(self, kind: DraKind) -> ListResult:
        try:
            return await self.client.list_path(path_of(kind), self._query(kind))
        except NotFound:
            raise NotFound(f"{path_of(kind)}: the API server does not serve it "
                           "(Kubernetes 1.34+ serves resource.k8s.io/v1)", code=404) from None

    def watch(self, kind: DraKind, resource_version: str) -> AsyncIterator[WatchEvent]:
        return self.client.watch_path(path_of(kind), resource_version, self._query(kind))

    async def get(self, kind: DraKind, namespace: str | None, name: str) -> dict[str, Any] | None:
        return await self.client.get(path_of(kind, namespace, name))

    async def update_status(self, claim: dict[str, Any]) -> dict[str, Any]:
        m = meta(claim)
        path = path_of("resourceclaims", m.get("namespace"), str(m.get("name", "")), "status")
        return await self.client.replace(path, claim)

    async def update(self, kind: DraKind, obj: dict[str, Any]) -> dict[str, Any]:
        m = meta(obj)
        return await self.client.replace(path_of(kind, m.get("namespace"), str(m.get("name", ""))), obj)

    async def create(self, kind: DraKind, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.client.create(path_of(kind, meta(obj).get("namespace")), obj)

    async def delete(self, kind: DraKind, namespace: str | None, name: str) -> None:
        await self.client.delete(path_of(kind, namespace, name))

    async def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        await self.client.record_event(namespace, event)
