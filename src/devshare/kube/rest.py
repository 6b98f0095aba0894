"""KubeClient: the one client of the API server, on aiohttp. Every request devshare makes goes here: the
lists and watches that feed the state, the Binding, Leases, Events, the claim ledger's ConfigMap,
deletions for preemption, and the node agent's writes (its Device, its Node's status and labels, its
pods' annotations, through :mod:`devshare.agent.kubeclient`).

**Paths** are built by one function, :func:`api_path`: every segment is quoted, and a namespace or a
name that is not a valid Kubernetes name (:mod:`devshare.model.kubeobjects`) is refused with
:class:`InvalidName` before any request is made. A pod name from a request body can therefore never
name another object or split the request.

**The connection** is the kubeconfig's (:class:`lightkube.config.kubeconfig.SingleConfig`, or the
in-cluster ServiceAccount): the server, the TLS context (the cluster's CA, a client certificate) and
the user's credentials (:mod:`devshare.kube.credentials`, asked again once after a 401). lightkube
is used for loading the kubeconfig and nothing else. The environment's proxy for the server
(``HTTPS_PROXY``, ``NO_PROXY``) is looked up once.

Objects are plain dicts decoded by msgspec. Errors are :mod:`devshare.kube.errors`: 404 NotFound,
409 Conflict, 410 Gone, 429 and 5xx Unavailable, a connection failure Unavailable, anything else
BackendError.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

import aiohttp
import msgspec
from aiohttp.helpers import get_env_proxy_for_url
from lightkube.config.client_adapter import user_auth, verify_cluster
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.config.models import User
from lightkube.core.exceptions import ConfigError
from yarl import URL

from devshare.kube.backend import Kind, ListResult, WatchEvent
from devshare.kube.credentials import Credentials
from devshare.kube.errors import BackendError, Conflict, Gone, NotFound, Unavailable
from devshare.model.errors import InvalidInput
from devshare.model.kubeobjects import label_problem, meta, subdomain_problem

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
PAGE = 500  # objects per page of a list (client-go's pager)
_ERRORS: dict[int, type[BackendError]] = {404: NotFound, 409: Conflict, 410: Gone}


class InvalidName(BackendError):
    """A namespace or name that is not a valid Kubernetes name: no request was made."""


class Resource(NamedTuple):
    group_version: str  # "v1", or "<group>/<version>"
    plural: str
    namespaced: bool


NODES = Resource("v1", "nodes", False)
PODS = Resource("v1", "pods", True)
EVENTS = Resource("v1", "events", True)
CONFIG_MAPS = Resource("v1", "configmaps", True)
LEASES = Resource("coordination.k8s.io/v1", "leases", True)
DEVICES = Resource("devshare.io/v1alpha1", "devices", False)
# Koordinator's Device, as koordlet writes it (taking over from Koordinator: devshare.engine.takeover)
KOORD_DEVICES = Resource("scheduling.koordinator.sh/v1alpha1", "devices", False)
WATCHED: dict[Kind, Resource] = {"nodes": NODES, "pods": PODS, "devices": DEVICES, "koorddevices": KOORD_DEVICES}


def api_path(resource: Resource, *, namespace: str | None = None, name: str | None = None,
             subresource: str | None = None) -> str:
    """The URL path of ``resource`` (in ``namespace``; all namespaces when None), of its object
    ``name``, of that object's ``subresource``. Every segment is quoted; a namespace that is not a
    DNS-1123 label or a name that is not a DNS-1123 subdomain raises :class:`InvalidName`."""
    segments = ["api", "v1"] if resource.group_version == "v1" else ["apis", *resource.group_version.split("/")]
    if namespace is not None:
        if not resource.namespaced:
            raise InvalidName(f"{resource.plural} are not namespaced: no namespace goes in their path")
        problem = label_problem(namespace)
        if problem is not None:
            raise InvalidName(f"{_shown(namespace)} is not a valid Kubernetes namespace ({problem}): no request "
                              "was sent")
        segments += ["namespaces", namespace]
    segments.append(resource.plural)
    if name is not None:
        problem = subdomain_problem(name)
        if problem is not None:
            raise InvalidName(f"{_shown(name)} is not a valid name of {resource.plural} ({problem}): no request "
                              "was sent")
        segments.append(name)
    if subresource is not None:
        segments.append(subresource)
    return "/" + "/".join(quote(s, safe="") for s in segments)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}...({len(text)} characters)"


class _Line(msgspec.Struct):
    """One line of a watch stream."""

    type: str
    object: dict[str, Any]


class _List(msgspec.Struct):
    """A page of a list."""

    metadata: dict[str, Any] = {}
    items: list[dict[str, Any]] | None = None


_decode_line = msgspec.json.Decoder(_Line).decode
_decode_list = msgspec.json.Decoder(_List).decode
_decode_object = msgspec.json.Decoder(dict[str, Any]).decode
_encode = msgspec.json.Encoder().encode


def error_for(code: int, message: str) -> BackendError:
    """The backend error for an HTTP status (or a Status object's code)."""
    if code in _ERRORS:
        return _ERRORS[code](message, code=code)
    if code == 429 or code >= 500:
        return Unavailable(message, code=code)
    return BackendError(message, code=code)


def _unavailable(what: str, e: BaseException) -> Unavailable:
    """A request that failed on its connection (refused, broken, timed out): ``what`` and the error."""
    return Unavailable(f"{what}: {type(e).__name__}: {e}" if str(e) else f"{what}: {type(e).__name__}")


def _status_message(body: bytes, code: int, what: str) -> str:
    """The ``message`` of a Kubernetes Status body, or a line saying what failed."""
    try:
        status = _decode_object(body)
    except (msgspec.DecodeError, UnicodeDecodeError):
        status = {}
    message = status.get("message") if isinstance(status, dict) else None
    return str(message) if message else f"HTTP {code} from {what}"


def _decoded(data: bytes) -> dict[str, Any]:
    try:
        return _decode_object(data)
    except msgspec.DecodeError as e:
        raise BackendError(f"the API server sent something that is not JSON: {e}") from e


def load_config(kubeconfig: str | Path | None = None, *, context: str | None = None) -> SingleConfig:
    """The kubeconfig file's context (``context``, else its current one), or (None) the in-cluster
    ServiceAccount, $KUBECONFIG or ~/.kube/config. :class:`InvalidInput` when it cannot be loaded."""
    try:
        config = (KubeConfig.from_file(str(kubeconfig)) if kubeconfig is not None
                  else KubeConfig.from_env()).get(context_name=context)
    except (ConfigError, OSError) as e:
        raise InvalidInput(f"cannot load the cluster configuration: {e}",
                           field=str(kubeconfig) if kubeconfig else "kubeconfig") from None
    if config is None:
        raise InvalidInput("the kubeconfig names no current context: give --context",
                           field=str(kubeconfig) if kubeconfig else "kubeconfig")
    return config


class KubeClient:
    """The API server of ``config``. ``namespace``: the one devshare runs in (its Lease, its ledger;
    default: the kubeconfig context's); ``timeout``: seconds for a request; ``watch_timeout``: seconds
    the server keeps one watch request open; ``field_manager``: the name written in managedFields."""

    def __init__(self, config: SingleConfig, *, namespace: str | None = None, timeout: float = 10.0,
                 watch_timeout: int = 300, field_manager: str = "devshare") -> None:
        cluster, user = config.cluster, config.user
        self.server = str(cluster.server).rstrip("/")
        try:
            self.ssl = (verify_cluster(cluster, user if user is not None else User(), config.abs_file)
                        if self.server.startswith("https:") else None)
            self.credentials = Credentials(user_auth(user) if user is not None else None)
        except (ConfigError, OSError) as e:
            raise InvalidInput(f"cannot load the cluster configuration: {e}", field="kubeconfig") from None
        self._namespace = namespace or config.namespace or "default"
        self.timeout = timeout
        self.watch_timeout = watch_timeout
        self.field_manager = field_manager
        # the environment's proxy for the server, looked up once: aiohttp's trust_env looks it up (and
        # ~/.netrc) in a worker thread for every request, two thread hand-offs costlier than the request
        try:
            self.proxy: URL | None
            self.proxy, self.proxy_auth = get_env_proxy_for_url(URL(self.server))
        except LookupError:
            self.proxy, self.proxy_auth = None, None
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def connect(cls, kubeconfig: str | Path | None = None, *, context: str | None = None,
                namespace: str | None = None, watch_timeout: int = 300, field_manager: str = "devshare"
                ) -> KubeClient:
        """From a kubeconfig file, or (None) in-cluster / $KUBECONFIG / ~/.kube/config."""
        return cls(load_config(kubeconfig, context=context), namespace=namespace, watch_timeout=watch_timeout,
                   field_manager=field_manager)

    @property
    def namespace(self) -> str:
        return self._namespace

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # made on first use: a session belongs to the running event loop
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.ssl if self.ssl is not None else True),
                headers={"Accept": JSON, "User-Agent": "devshare"}, trust_env=False)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------------ requests
    async def _send(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                    body: bytes | None = None, content_type: str = JSON,
                    timeout: aiohttp.ClientTimeout | None = None) -> aiohttp.ClientResponse:
        """The response (status checked by the caller; the caller releases it), retried once with fresh
        credentials after a 401."""
        session = self._client()
        headers = {"Content-Type": content_type} if body is not None else {}
        for attempt in (0, 1):
            header = await self.credentials.header()
            if header is not None:
                if "\r" in header or "\n" in header:
                    raise BackendError("the kubeconfig user's credentials hold a line break: they cannot be sent")
                headers["Authorization"] = header
            try:
                resp = await session.request(method, self.server + path, params=params, data=body, headers=headers,
                                             timeout=timeout or aiohttp.ClientTimeout(total=self.timeout),
                                             proxy=self.proxy, proxy_auth=self.proxy_auth)
            except (aiohttp.ClientError, OSError, TimeoutError) as e:
                raise _unavailable(f"{method} {path}", e) from e
            if resp.status == 401 and attempt == 0 and await self.credentials.refresh(header):
                resp.release()
                continue
            return resp
        raise AssertionError("unreachable")

    async def _call(self, method: str, path: str, *, body: Any = None, params: Mapping[str, str] | None = None,
                    content_type: str = JSON) -> bytes:
        """The answer's body; its status as an error (:func:`error_for`)."""
        data = None if body is None else _encode(body)
        if method in ("POST", "PUT", "PATCH") and not path.endswith("/binding"):
            params = {**(params or {}), "fieldManager": self.field_manager}
        resp = await self._send(method, path, params=params, body=data, content_type=content_type)
        try:
            answer = await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise _unavailable(f"{method} {path}", e) from e
        finally:
            resp.release()
        if resp.status >= 400:
            raise error_for(resp.status, _status_message(answer, resp.status, f"{method} {path}"))
        return answer

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``, or None when there is none (404)."""
        try:
            return _decoded(await self._call("GET", path))
        except NotFound:
            return None

    async def list_path(self, path: str, params: Mapping[str, str] | None = None) -> ListResult:
        """Every object of the collection at ``path``, a page of :data:`PAGE` at a time, and the list's
        resourceVersion (the first page's: the pages are one snapshot)."""
        items: list[dict[str, Any]] = []
        version = ""
        query = {**(params or {}), "limit": str(PAGE)}
        while True:
            data = await self._call("GET", path, params=query)
            try:
                page = _decode_list(data)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                raise BackendError(f"the API server sent a list that is not one: {e}") from e
            items += page.items or []
            version = version or str(page.metadata.get("resourceVersion") or "")
            more = page.metadata.get("continue")
            if not more:
                return ListResult(items, version)
            query["continue"] = str(more)

    async def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        return _decoded(await self._call("POST", path, body=obj))

    async def replace(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT with the object's metadata.resourceVersion: 409 when it is not current."""
        return _decoded(await self._call("PUT", path, body=obj))

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return _decoded(await self._call("PATCH", path, body=patch, content_type=MERGE_PATCH))

    async def delete(self, path: str) -> None:
        """Delete the object at ``path`` (404 raises :class:`NotFound`)."""
        await self._call("DELETE", path)

    async def watch_path(self, path: str, resource_version: str,
                         params: Mapping[str, str] | None = None) -> AsyncIterator[WatchEvent]:
        """The changes at ``path`` (a collection; ``params``: a field selector) after ``resource_version``,
        until the API server ends the watch (after ``watch_timeout`` seconds). An ERROR event raises its
        Status's error (410: Gone)."""
        params = {**(params or {}), "watch": "true", "timeoutSeconds": str(self.watch_timeout)}
        if resource_version:
            params["resourceVersion"] = resource_version
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=self.watch_timeout + 30)
        resp = await self._send("GET", path, params=params, timeout=timeout)
        try:
            if resp.status >= 400:
                data = await resp.read()
                raise error_for(resp.status, _status_message(data, resp.status, f"watch {path}"))
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                if b"\n" not in buffer:
                    continue
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _event(line)
            if buffer.strip():
                yield _event(buffer)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise _unavailable(f"watch {path}", e) from e
        finally:
            resp.release()

    # ------------------------------------------------------------------ the Backend (kube/backend.py)
    async def list(self, kind: Kind) -> ListResult:
        return await self.list_path(api_path(WATCHED[kind]))

    def watch(self, kind: Kind, resource_version: str) -> AsyncIterator[WatchEvent]:
        """One watch request (it ends when the API server closes it after ``watch_timeout``)."""
        return self.watch_path(api_path(WATCHED[kind]), resource_version)

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get(api_path(PODS, namespace=namespace, name=name))

    async def list_node_pods(self, namespace: str | None, node: str) -> list[dict[str, Any]]:
        """The pods of ``namespace`` (None: every namespace) bound to ``node`` (a field selector)."""
        listed = await self.list_path(api_path(PODS, namespace=namespace), {"fieldSelector": f"spec.nodeName={node}"})
        return [p for p in listed.items if (p.get("spec") or {}).get("nodeName") == node]

    async def patch_pod_annotations(self, namespace: str, name: str, annotations: Mapping[str, str | None], *,
                                    uid: str | None = None) -> dict[str, Any]:
        """Merge ``annotations`` into the pod's (None removes one). ``uid``: only the pod of that uid (a
        precondition: the API server refuses the patch of another pod under the name)."""
        m: dict[str, Any] = {"annotations": dict(annotations)}
        if uid is not None:
            m["uid"] = uid
        return await self.merge_patch(api_path(PODS, namespace=namespace, name=name), {"metadata": m})

    async def bind_pod(self, namespace: str, name: str, node: str, *, uid: str | None = None,
                       annotations: Mapping[str, str] | None = None, resource_version: str | None = None) -> None:
        # the binding subresource checks metadata.uid and metadata.resourceVersion as preconditions
        # and copies metadata.annotations onto the pod (pkg/registry/core/pod/storage, BindingREST)
        path = api_path(PODS, namespace=namespace, name=name, subresource="binding")
        m: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            m["uid"] = uid
        if resource_version:
            m["resourceVersion"] = resource_version
        if annotations:
            m["annotations"] = dict(annotations)
        await self._call("POST", path, body={"apiVersion": "v1", "kind": "Binding", "metadata": m,
                                             "target": {"apiVersion": "v1", "kind": "Node", "name": node}})

    async def delete_pod(self, namespace: str, name: str, *, uid: str | None = None) -> None:
        """Delete the pod with its own grace period; with ``uid``, only the pod of that uid (a
        precondition: another pod under the name, created meanwhile, is left alone)."""
        path = api_path(PODS, namespace=namespace, name=name)
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}} if uid else None
        try:
            await self._call("DELETE", path, body=options)
        except Conflict:
            if uid is None:
                raise  # only a precondition makes a deletion conflict

    async def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get(api_path(LEASES, namespace=namespace, name=name))

    async def create_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        return await self.create(api_path(LEASES, namespace=namespace), _in(lease, namespace, "Lease", LEASES))

    async def replace_lease(self, namespace: str, lease: dict[str, Any]) -> dict[str, Any]:
        path = api_path(LEASES, namespace=namespace, name=meta(lease).get("name"))
        return await self.replace(path, _in(lease, namespace, "Lease", LEASES))

    async def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        await self.create(api_path(EVENTS, namespace=namespace), _in(event, namespace, "Event", EVENTS))

    async def get_config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get(api_path(CONFIG_MAPS, namespace=namespace, name=name))

    async def create_config_map(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.create(api_path(CONFIG_MAPS, namespace=namespace),
                                 _in(obj, namespace, "ConfigMap", CONFIG_MAPS))

    async def replace_config_map(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        # PUT with metadata.resourceVersion: the API server answers 409 when it is not current
        path = api_path(CONFIG_MAPS, namespace=namespace, name=meta(obj).get("name"))
        return await self.replace(path, _in(obj, namespace, "ConfigMap", CONFIG_MAPS))

    # ------------------------------------------------------------------ the node agent's objects
    async def get_device(self, name: str) -> dict[str, Any] | None:
        return await self.get(api_path(DEVICES, name=name))

    async def create_device(self, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.create(api_path(DEVICES), obj)

    async def replace_device(self, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.replace(api_path(DEVICES, name=meta(obj).get("name")), obj)

    async def patch_node_status(self, node: str, status: dict[str, Any]) -> dict[str, Any]:
        return await self.merge_patch(api_path(NODES, name=node, subresource="status"), {"status": status})

    async def patch_node_labels(self, node: str, labels: Mapping[str, str | None]) -> dict[str, Any]:
        return await self.merge_patch(api_path(NODES, name=node), {"metadata": {"labels": dict(labels)}})

    async def patch_node_taints(self, node: str, taints: list[dict[str, Any]], resource_version: str) -> dict[str, Any]:
        """Set the node's ``spec.taints`` to ``taints``, only if the node is still at ``resource_version``
        (409 otherwise). A merge patch replaces the whole list (Taint has no merge key), so the list
        written is the one read plus or minus one entry, and the version in the patch is its precondition."""
        return await self.merge_patch(api_path(NODES, name=node),
                                      {"metadata": {"resourceVersion": resource_version}, "spec": {"taints": taints}})


def _in(obj: dict[str, Any], namespace: str, kind: str, resource: Resource) -> dict[str, Any]:
    """``obj`` with its namespace, kind and apiVersion set."""
    return {"apiVersion": resource.group_version, "kind": kind, **obj,
            "metadata": {**meta(obj), "namespace": namespace}}


def _event(line: bytes) -> WatchEvent:
    try:
        ev = _decode_line(line)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise BackendError(f"the API server sent a watch event that is not JSON: {e}") from e
    if ev.type == "ERROR":
        status = ev.object
        code = int(status.get("code") or 500)
        raise error_for(code, str(status.get("message") or f"watch error {code}"))
    return WatchEvent(ev.type, ev.object)
