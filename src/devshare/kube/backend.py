"""The backend interface: what the extender, webhook and CLI need from a cluster.

Two implementations: :class:`devshare.kube.rest.KubeClient` (a real API server) and
:class:`devshare.kube.memory.MemoryBackend` (objects from a ``--cluster`` YAML file). Objects are
plain dicts in the API's JSON shape; callers must not mutate the dicts they are given.

Errors are those of :mod:`devshare.kube.errors`: :class:`~.errors.Gone` from ``watch`` means
re-list, :class:`~.errors.Unavailable` means retry with backoff, :class:`~.errors.Conflict` and
:class:`~.errors.NotFound` are the API's 409 and 404.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, NamedTuple, Protocol

from devshare.model.kubeobjects import meta

Kind = Literal["nodes", "pods", "devices", "koorddevices"]
# koorddevices: Koordinator's Device (scheduling.koordinator.sh/v1alpha1), read beside devshare's own
# where koordlet still reports a node (taking over from Koordinator); optional: a cluster without its
# CRD, or RBAC that does not let devshare read it, has none (devshare.kube.informer)
KINDS: tuple[Kind, ...] = ("nodes", "devices", "koorddevices", "pods")
OPTIONAL_KINDS: frozenset[Kind] = frozenset({"koorddevices"})

EventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]


class WatchEvent(NamedTuple):
    type: str  # ADDED | MODIFIED | DELETED | BOOKMARK
    object: dict[str, Any]


class ListResult(NamedTuple):
    items: list[dict[str, Any]]
    resource_version: str  # where a watch continues from


class Backend(Protocol):
    @property
    def namespace(self) -> str:
        """The namespace devshare itself runs in (where its Lease lives)."""
        ...

    async def list(self, kind: Kind) -> ListResult:
        """Every object of ``kind`` (pods: in all namespaces) and the list's resourceVersion."""
        ...

    def watch(self, kind: Kind, resource_version: str) -> AsyncIterator[WatchEvent]:
        """Changes to ``kind`` after ``resource_version``, until cancelled. Raises Gone (re-list) or
        Unavailable (reconnect); may also just end (call again from the last version seen)."""
        ...

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        ...

    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> dict[str, Any]:
        """Merge-patch the pod's annotations (None removes a key). Returns the patched pod."""
        ...

    async def bind_pod(self, namespace: str, name: str, node: str, *, uid: str | None = None,
                       annotations: Mapping[str, str] | None = None, resource_version: str | None = None) -> None:
        """Create the pod's Binding to ``node``. Conflict if it is already bound, its uid differs or
        (given ``resource_version``) it changed since. The API server copies the Binding's
        ``annotations`` onto the pod in the same write: the allocation and the binding are one act."""
        ...

    async def delete_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        """Delete the pod with its own grace period (preemption). NotFound when it is gone; a pod of
        another ``uid`` (deleted and re-created meanwhile) is left alone."""
        ...

    async def patch_node_taints(self, node: str, taints: list[dict[str, Any]], resource_version: str) -> dict[str, Any]:
        """Set the node's taints to ``taints`` if it is still at ``resource_version`` (Conflict otherwise).
        Returns the node."""
        ...

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        ...

    async def create_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        """Create a Lease. Conflict if it exists."""
        ...

    async def replace_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        """Replace a Lease; its metadata.resourceVersion must be current (else Conflict)."""
        ...

    async def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        """Create a v1 Event (best effort: callers may ignore failures)."""
        ...

    # ConfigMaps in devshare's own namespace: the claim ledger (:mod:`devshare.kube.ledger`)
    async def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        ...

    async def create_config_map(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create a ConfigMap. Conflict if it exists."""
        ...

    async def replace_config_map(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Replace a ConfigMap; its metadata.resourceVersion must be current (else Conflict; NotFound
        when it was deleted): the compare-and-swap the claim ledger is built on."""
        ...

    async def close(self) -> None:
        ...


def resource_version(obj: Mapping[str, Any]) -> str | None:
    rv = meta(obj).get("resourceVersion")
    return str(rv) if rv is not None else None
