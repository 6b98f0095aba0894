"""ApiRequests: the extender's hot requests to the API server, over aiohttp and over connections of
its own.

A bind makes one Binding POST (and now and then a pod GET or a claim ledger write), and the watches
deliver every change of every pod; through lightkube's httpx client each request cost about 834 µs
of CPU in the extender, through aiohttp 153 µs (measured on the e2e control plane), on the cores
kube-scheduler and the API server need. So those requests go here; the rest (lists, Leases, Events,
deletes) stays on lightkube (:mod:`devshare.kube.live`). The watches go through aiohttp's client; the
small requests over :mod:`devshare.kube.http1`'s kept-alive connections (about 200 µs less each),
unless a proxy is set for the server or ``direct`` is off, and then through aiohttp's too.

The connection is lightkube's: :class:`lightkube.config.kubeconfig.SingleConfig` gives the server,
the TLS context (the cluster's CA, a client certificate) and the user's credentials (a token, a
token file such as the in-cluster ServiceAccount's, an exec plugin, basic auth), driven through
lightkube's own ``httpx.Auth`` objects. On a 401 the credentials are asked again once (a token file
is re-read, an exec plugin run again: tokens rotate) and the request retried.

Objects are plain dicts decoded by msgspec. Errors are :mod:`devshare.kube.errors`: 404 NotFound,
409 Conflict, 410 Gone, 429 and 5xx Unavailable, a connection failure Unavailable, anything else
BackendError.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import httpx2 as httpx
import msgspec
from aiohttp.helpers import get_env_proxy_for_url
from lightkube.config.client_adapter import user_auth, verify_cluster
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User
from yarl import URL

from devshare.kube.backend import WatchEvent
from devshare.kube.errors import BackendError, Conflict, Gone, NotFound, Unavailable
from devshare.kube.http1 import Connections

JSON = "application/json"
_ERRORS: dict[int, type[BackendError]] = {404: NotFound, 409: Conflict, 410: Gone}


class _Line(msgspec.Struct):
    """One line of a watch stream."""

    type: str
    object: dict[str, Any]


_decode_line = msgspec.json.Decoder(_Line).decode
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


class Credentials:
    """The ``Authorization`` header of a kubeconfig user, through lightkube's ``httpx.Auth`` for it
    (None: the user authenticates with a client certificate, or not at all). The header is asked once
    and kept; :meth:`refresh` asks again after a 401."""

    def __init__(self, auth: httpx.Auth | None) -> None:
        self.auth = auth
        self._header: str | None = None
        self._asked = False
        self._lock = asyncio.Lock()

    async def header(self) -> str | None:
        if not self._asked:
            async with self._lock:
                if not self._asked:
                    self._header = await self._ask(refresh=False)
                    self._asked = True
        return self._header

    async def refresh(self, rejected: str | None) -> bool:
        """Ask again after the API server refused ``rejected``; True when the header changed (retry)."""
        async with self._lock:
            if self._header != rejected:
                return True  # another request refreshed it meanwhile
            self._header = await self._ask(refresh=True)
            self._asked = True
            return self._header != rejected

    async def _ask(self, *, refresh: bool) -> str | None:
        if self.auth is None:
            return None
        request = httpx.Request("GET", "https://kubernetes.invalid/")
        flow = self.auth.async_auth_flow(request)
        try:
            sent = await flow.__anext__()
            header = sent.headers.get("Authorization")
            if refresh:
                try:
                    sent = await flow.asend(httpx.Response(401, request=sent))
                    header = sent.headers.get("Authorization")
                except StopAsyncIteration:
                    pass  # a fixed credential: nothing to ask again
        except Exception as e:  # lightkube's ConfigError (a token file gone, an exec plugin failing), ...
            raise BackendError(f"cannot get the credentials of the kubeconfig user: {e}") from e
        finally:
            await flow.aclose()
        return header


class ApiRequests:
    """GET a pod, POST a Binding, watch a resource: to ``config``'s server, the watches over one aiohttp
    session, the other requests over :mod:`devshare.kube.http1`'s connections (``direct``, and no
    proxy set for the server) or the same session. ``timeout``: seconds for a request (a watch: for the
    connection and between two reads)."""

    def __init__(self, config: SingleConfig, *, timeout: float = 10.0, direct: bool = True) -> None:
        cluster, user = config.cluster, config.user
        self.server = str(cluster.server).rstrip("/")
        self.ssl = (verify_cluster(cluster, user if user is not None else User(), config.abs_file)
                    if self.server.startswith("https:") else None)
        self.credentials = Credentials(user_auth(user) if user is not None else None)
        self.timeout = timeout
        # the environment's proxy for the server (HTTPS_PROXY, NO_PROXY), looked up once: aiohttp's
        # trust_env looks it up (and ~/.netrc) in a worker thread for every request, two thread
        # hand-offs that cost more CPU than the request itself
        try:
            self.proxy: URL | None
            self.proxy, self.proxy_auth = get_env_proxy_for_url(URL(self.server))
        except LookupError:
            self.proxy, self.proxy_auth = None, None
        self._session: aiohttp.ClientSession | None = None
        # the small requests' own connections (http1): without a proxy, where aiohttp is not needed
        url = URL(self.server)
        self._target = url.raw_path.rstrip("/")  # a path the server is under, e.g. behind a gateway
        self._fixed_headers = f"Host: {url.host_port_subcomponent}\r\nUser-Agent: devshare\r\nAccept: {JSON}\r\n"
        self.connections: Connections | None = None
        if direct and self.proxy is None and url.host is not None and url.port is not None:
            self.connections = Connections(url.host, url.port, self.ssl)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # made on first use: a session belongs to the running event loop
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.ssl if self.ssl is not None else True),
                headers={"Accept": JSON, "User-Agent": "devshare"}, trust_env=False)
        return self._session

    async def close(self) -> None:
        if self.connections is not None:
            self.connections.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------------ requests
    async def _send(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                    body: bytes | None = None, timeout: aiohttp.ClientTimeout | None = None
                    ) -> aiohttp.ClientResponse:
        """The response (status checked by the caller; the caller releases it), retried once with fresh
        credentials after a 401."""
        session = self._client()
        headers = {"Content-Type": JSON} if body is not None else {}
        for attempt in (0, 1):
            header = await self.credentials.header()
            if header is not None:
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

    async def _call(self, method: str, path: str, *, body: bytes | None = None) -> bytes:
        if self.connections is not None:
            return await self._call_direct(self.connections, method, path, body)
        resp = await self._send(method, path, body=body)
        try:
            data = await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise Unavailable(f"{method} {path}: {type(e).__name__}: {e}") from e
        finally:
            resp.release()
        if resp.status >= 400:
            raise error_for(resp.status, _status_message(data, resp.status, f"{method} {path}"))
        return data

    async def _call_direct(self, connections: Connections, method: str, path: str, body: bytes | None) -> bytes:
        """:meth:`_call` over :mod:`devshare.kube.http1`: the request written in one piece."""
        for attempt in (0, 1):
            header = await self.credentials.header()
            head = f"{method} {self._target}{path} HTTP/1.1\r\n{self._fixed_headers}"
            if header is not None:
                if "\r" in header or "\n" in header:
                    raise BackendError("the kubeconfig user's credentials hold a line break: they cannot be sent")
                head += f"Authorization: {header}\r\n"
            if body is not None:
                head += f"Content-Type: {JSON}\r\nContent-Length: {len(body)}\r\n"
            try:
                data = head.encode("latin-1") + b"\r\n"
            except UnicodeEncodeError as e:
                raise BackendError(f"{method} {path}: a header holds a character HTTP cannot carry: {e}") from e
            try:
                answer = await connections.request(data + body if body is not None else data, timeout=self.timeout)
            except (OSError, TimeoutError) as e:  # ProtocolError and ssl.SSLError are OSErrors
                raise _unavailable(f"{method} {path}", e) from e
            if answer.status == 401 and attempt == 0 and await self.credentials.refresh(header):
                continue
            if answer.status >= 400:
                raise error_for(answer.status, _status_message(answer.body, answer.status, f"{method} {path}"))
            return answer.body
        raise AssertionError("unreachable")

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``, or None when there is none (404)."""
        try:
            data = await self._call("GET", path)
        except NotFound:
            return None
        try:
            return _decode_object(data)
        except msgspec.DecodeError as e:
            raise BackendError(f"the API server sent something that is not JSON: {e}") from e

    async def post(self, path: str, obj: dict[str, Any]) -> None:
        await self._call("POST", path, body=_encode(obj))

    async def send(self, method: str, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """POST or PUT ``obj`` at ``path``: the object as the API server stored it."""
        data = await self._call(method, path, body=_encode(obj))
        try:
            return _decode_object(data)
        except msgspec.DecodeError as e:
            raise BackendError(f"the API server sent something that is not JSON: {e}") from e

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self.get(f"/api/v1/namespaces/{namespace}/pods/{name}")

    async def bind_pod(self, namespace: str, name: str, binding: dict[str, Any]) -> None:
        await self.post(f"/api/v1/namespaces/{namespace}/pods/{name}/binding", binding)

    async def watch(self, path: str, resource_version: str, *, server_timeout: int) -> AsyncIterator[WatchEvent]:
        """The changes at ``path`` (a collection) after ``resource_version``, until the API server ends
        the watch (``server_timeout`` seconds). An ERROR event raises its Status's error (410: Gone)."""
        params = {"watch": "true", "timeoutSeconds": str(server_timeout)}
        if resource_version:
            params["resourceVersion"] = resource_version
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=server_timeout + 30)
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
