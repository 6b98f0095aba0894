"""LiveBackend: a real API server through lightkube's async client, and through aiohttp
(:class:`devshare.kube.rest.ApiRequests`, on lightkube's connection settings) for the hot requests: the
watches, the pod GET and the Binding of a bind.

Objects travel as plain dicts: Nodes, Pods, Leases and Events are declared here as lightkube
*generic* resources (dict-backed, decoded straight from JSON), Devices with
``create_global_resource``. The Binding is posted as a plain dict (the API server answers it with a
Status).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx2 as httpx
import msgspec
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from lightkube.core.exceptions import ApiError, ConfigError
from lightkube.generic_resource import (
    GenericGlobalResource,
    GenericNamespacedResource,
    create_api_info,
    create_global_resource,
)
from lightkube.types import PatchType

from devshare.kube.backend import Kind, ListResult, WatchEvent, meta
from devshare.kube.errors import BackendError, Conflict, Gone, NotFound, Unavailable
from devshare.kube.rest import ApiRequests
from devshare.model.errors import InvalidInput

Device = create_global_resource("devshare.io", "v1alpha1", "Device", "devices")


class KoordDevice(GenericGlobalResource):
    _api_info = create_api_info("scheduling.koordinator.sh", "v1alpha1", "Device", "devices")


class Node(GenericGlobalResource):
    _api_info = create_api_info("", "v1", "Node", "nodes")


class Pod(GenericNamespacedResource):
    _api_info = create_api_info("", "v1", "Pod", "pods")


class Lease(GenericNamespacedResource):
    _api_info = create_api_info("coordination.k8s.io", "v1", "Lease", "leases")


class Event(GenericNamespacedResource):
    _api_info = create_api_info("", "v1", "Event", "events")


_RESOURCES: dict[str, type[Any]] = {"nodes": Node, "pods": Pod, "devices": Device, "koorddevices": KoordDevice}
# where each kind is watched (pods: in every namespace)
WATCH_PATHS: dict[str, str] = {"nodes": "/api/v1/nodes", "pods": "/api/v1/pods",
                               "devices": "/apis/devshare.io/v1alpha1/devices",
                               "koorddevices": "/apis/scheduling.koordinator.sh/v1alpha1/devices"}
_ERRORS: dict[int, type[BackendError]] = {404: NotFound, 409: Conflict, 410: Gone}


def translate(e: Exception) -> BackendError:
    """The backend error for a lightkube/httpx exception."""
    if isinstance(e, ApiError):
        code = int(e.status.code or (e.response.status_code if e.response is not None else 0))
        message = e.status.message or str(e)
    elif isinstance(e, httpx.HTTPStatusError):
        code, message = e.response.status_code, f"HTTP {e.response.status_code} from {e.request.url}"
    elif isinstance(e, httpx.TransportError | httpx.StreamError):
        return Unavailable(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
    else:
        return BackendError(f"{type(e).__name__}: {e}")
    if code in _ERRORS:
        return _ERRORS[code](message, code=code)
    if code == 429 or code >= 500:
        return Unavailable(message, code=code)
    return BackendError(message, code=code)


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except BackendError:
        raise
    except (httpx.HTTPError, httpx.StreamError) as e:
        raise translate(e) from e
    except msgspec.DecodeError as e:
        raise BackendError(f"the API server sent something that is not JSON: {e}") from e


class LiveBackend:
    """A Kubernetes API server. ``watch_timeout``: seconds the server keeps one watch request open."""

    def __init__(self, client: AsyncClient, api: ApiRequests, *, namespace: str | None = None,
                 watch_timeout: int = 300) -> None:
        # typed Any: lightkube's overloads describe its typed models, not the dict-backed resources used here
        self.client: Any = client
        self.api = api  # the hot requests: watches, pod GET, Binding
        self._namespace = namespace or client.namespace or "default"
        self.watch_timeout = watch_timeout

    @classmethod
    def connect(cls, kubeconfig: str | Path | None = None, *, context: str | None = None,
                namespace: str | None = None, watch_timeout: int = 300, direct: bool = True) -> LiveBackend:
        """From a kubeconfig file, or (None) in-cluster / $KUBECONFIG / ~/.kube/config. ``direct``:
        :class:`ApiRequests`' small requests over its own connections (:mod:`devshare.kube.http1`)."""
        try:
            config = (KubeConfig.from_file(str(kubeconfig)) if kubeconfig is not None
                      else KubeConfig.from_env()).get(context_name=context)
        except (ConfigError, OSError) as e:
            raise InvalidInput(f"cannot load the cluster configuration: {e}",
                               field=str(kubeconfig) if kubeconfig else "kubeconfig") from None
        client = AsyncClient(config, field_manager="devshare", lazy=True)
        try:
            api = ApiRequests(config, direct=direct)
        except (ConfigError, OSError) as e:
            raise InvalidInput(f"cannot load the cluster configuration: {e}",
                               field=str(kubeconfig) if kubeconfig else "kubeconfig") from None
        return cls(client, api, namespace=namespace, watch_timeout=watch_timeout)

    @property
    def namespace(self) -> str:
        return self._namespace

    async def list(self, kind: Kind) -> ListResult:
        res = _RESOURCES[kind]
        kw: dict[str, Any] = {"namespace": "*"} if kind == "pods" else {}
        with _translated():
            it = self.client.list(res, **kw)
            items = [dict(o) async for o in it]
            try:
                rv = it.resourceVersion
            except Exception:  # an empty first page may carry no version in old servers
                rv = ""
        return ListResult(items, rv)

    def watch(self, kind: Kind, resource_version: str) -> AsyncIterator[WatchEvent]:
        """One watch request (it ends when the API server closes it after ``watch_timeout``)."""
        return self.api.watch(WATCH_PATHS[kind], resource_version, server_timeout=self.watch_timeout)

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.api.get_pod(namespace, name)

    async def list_node_pods(self, namespace: str, node: str) -> list[dict[str, Any]]:
        """The pods of ``namespace`` bound to ``node`` (a field selector: one small list)."""
        with _translated():
            return [dict(o) async for o in self.client.list(Pod, namespace=namespace,
                                                             fields={"spec.nodeName": node})]

    async def patch_pod_annotations(
        self, namespace: str, name: str, annotations: Mapping[str, str | None]
    ) -> dict[str, Any]:
        with _translated():
            out = await self.client.patch(Pod, name, {"metadata": {"annotations": dict(annotations)}},
                                          namespace=namespace, patch_type=PatchType.MERGE)
        return dict(out)

    async def bind_pod(self, namespace: str, name: str, node: str, *, uid: str | None = None,
                       annotations: Mapping[str, str] | None = None, resource_version: str | None = None) -> None:
        # the binding subresource checks metadata.uid and metadata.resourceVersion as preconditions
        # and copies metadata.annotations onto the pod (pkg/registry/core/pod/storage, BindingREST)
        m: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            m["uid"] = uid
        if resource_version:
            m["resourceVersion"] = resource_version
        if annotations:
            m["annotations"] = dict(annotations)
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "Binding", "metadata": m,
                                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        await self.api.bind_pod(namespace, name, body)

    async def delete_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        with _translated():
            if uid:
                current = await self.client.get(Pod, name, namespace=namespace)
                if (meta(dict(current)).get("uid") or uid) != uid:
                    return
            await self.client.delete(Pod, name, namespace=namespace)

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            with _translated():
                return dict(await self.client.get(Lease, name, namespace=namespace))
        except NotFound:
            return None

    async def create_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        with _translated():
            return dict(await self.client.create(Lease(**_in(lease, namespace)), namespace=namespace))

    async def replace_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        with _translated():
            return dict(await self.client.replace(Lease(**_in(lease, namespace)), namespace=namespace))

    async def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        with _translated():
            await self.client.create(Event(**_in(event, namespace)), namespace=namespace)

    # the claim ledger's requests on the bind path go through ApiRequests (aiohttp), as the Binding does
    async def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.api.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")

    async def create_config_map(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.api.send("POST", f"/api/v1/namespaces/{namespace}/configmaps", _in(obj, namespace))

    async def replace_config_map(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        # PUT with metadata.resourceVersion: the API server answers 409 when it is not current
        name = meta(obj)["name"]
        return await self.api.send("PUT", f"/api/v1/namespaces/{namespace}/configmaps/{name}", _in(obj, namespace))

    async def close(self) -> None:
        await self.api.close()
        await self.client.close()


def _in(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    return {**obj, "metadata": {**meta(obj), "namespace": namespace}}
