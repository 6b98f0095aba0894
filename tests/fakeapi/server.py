"""A fake Kubernetes API server (aiohttp on 127.0.0.1; plain HTTP, or TLS with ``ssl_context``) good
enough for lightkube and devshare's own requests (``kube/rest.py``). With ``token`` set, every request
must carry ``Authorization: Bearer <token>`` (else 401 Unauthorized, as the real one).

It speaks the real REST and watch protocol for the resources devshare uses: nodes, pods (and
``pods/{name}/binding``), events, configmaps, leases (``coordination.k8s.io/v1``) and devices
(``devshare.io/v1alpha1``). Objects live in a :class:`devshare.kube.store.ObjectStore` (a global
resourceVersion, history for watches, compaction).

Protocol covered:
- GET list (``metadata.resourceVersion`` on the list; ``labelSelector`` of ``k=v`` and ``k`` terms;
  ``fieldSelector`` of ``spec.nodeName=<node>``; pages with ``limit`` and ``continue``),
  GET item, POST (201, 409 AlreadyExists), PUT (409 Conflict on a stale ``metadata.resourceVersion``),
  PATCH (merge-patch+json; a strategic-merge-patch+json is applied as a merge patch, exact for maps
  such as annotations),
  DELETE (409 when its ``preconditions.uid`` is not the object's; so is a PATCH whose ``metadata.uid``
  is not), POST ``pods/{name}/binding`` (201 Status; 409 when already bound).
- GET ``?watch=true``: JSON lines ``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}``
  after ``resourceVersion`` (no version or "0": synthetic ADDED for what exists, then changes);
  ``timeoutSeconds`` ends the stream cleanly. A version older than the compacted history gets an
  ERROR event carrying a 410 Status (or HTTP 410 with ``gone_as_http = True``).

Test controls: :meth:`FakeApiServer.put`/``delete`` (inject changes), :meth:`compact`,
:meth:`expire_watches` (410 to every open watch), :meth:`drop_watches` (cut connections),
:meth:`send_bookmarks`, :meth:`fail_next` (fail the next N requests of a verb and resource with a
status, or 0 to cut the connection), and :attr:`requests` (method, path, query) for assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from devshare.kube.errors import BackendError, Conflict, Gone, NotFound
from devshare.kube.store import ObjectStore

# (group, version, plural) -> namespaced?
RESOURCES: dict[tuple[str, str, str], bool] = {
    ("", "v1", "nodes"): False,
    ("", "v1", "pods"): True,
    ("", "v1", "events"): True,
    ("devshare.io", "v1alpha1", "devices"): False,
    ("coordination.k8s.io", "v1", "leases"): True,
    ("", "v1", "configmaps"): True,
    ("resource.k8s.io", "v1", "resourceslices"): False,
    ("resource.k8s.io", "v1", "resourceclaims"): True,
    ("resource.k8s.io", "v1", "resourceclaimtemplates"): True,
    ("resource.k8s.io", "v1", "deviceclasses"): False,
}
KIND_OF = {"nodes": "Node", "pods": "Pod", "events": "Event", "devices": "Device", "leases": "Lease",
           "configmaps": "ConfigMap", "resourceslices": "ResourceSlice", "resourceclaims": "ResourceClaim",
           "resourceclaimtemplates": "ResourceClaimTemplate", "deviceclasses": "DeviceClass"}
MERGE_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Success" if code < 400 else "Failure", "message": message, "reason": reason,
            "code": code}


def json_response(obj: Any, code: int = 200) -> web.Response:
    # lightkube turns an error into ApiError only for exactly "application/json"
    return web.Response(status=code, body=json.dumps(obj).encode(), headers={"Content-Type": "application/json"})


def error_response(code: int, message: str) -> web.Response:
    reason = {400: "BadRequest", 404: "NotFound", 405: "MethodNotAllowed", 409: "Conflict", 410: "Expired",
              415: "UnsupportedMediaType", 500: "InternalError", 503: "ServiceUnavailable"}.get(code, "Unknown")
    return json_response(status(code, reason, message), code)


@dataclass
class Route:
    group: str
    version: str
    plural: str
    namespace: str | None
    name: str | None
    sub: str | None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclass(eq=False)
class _Watch:
    request: web.Request
    response: web.StreamResponse
    expire: bool = False
    bookmark: bool = False


@dataclass
class FakeApiServer:
    store: ObjectStore = field(default_factory=lambda: ObjectStore(history_limit=None))
    gone_as_http: bool = False  # answer a too-old watch with HTTP 410 instead of an ERROR event
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    port: int = 0
    ssl_context: ssl.SSLContext | None = None  # serve HTTPS with it
    token: str | None = None  # the one bearer token accepted (None: any request is accepted)
    _failures: dict[tuple[str, str], list[int]] = field(default_factory=lambda: defaultdict(list))
    _watches: set[Any] = field(default_factory=set)
    _runner: web.AppRunner | None = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> FakeApiServer:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
        await site.start()
        server = site._server
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context is not None else 'http'}://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: Path, *, namespace: str = "devshare-system", ca: Path | None = None,
                         user: dict[str, Any] | None = None) -> Path:
        """A kubeconfig for this server: ``ca`` the CA file that signed its certificate (with TLS),
        ``user`` the kubeconfig user (default: this server's token, or ``fake-token``)."""
        cluster: dict[str, Any] = {"server": self.url}
        if ca is not None:
            cluster["certificate-authority"] = str(ca)
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "fake", "cluster": cluster}],
            "users": [{"name": "fake", "user": user if user is not None else {"token": self.token or "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}],
            "current-context": "fake",
        }))
        return path

    # ------------------------------------------------------------------ test controls
    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace any object (its kind picks the resource); returns it as stored."""
        plural = {v: k for k, v in KIND_OF.items()}[obj["kind"]]
        obj = _stamped(obj, namespaced=RESOURCES[_key_of(plural)])
        return self.store.put(plural, _store_key(obj), obj)

    def delete(self, plural: str, key: str) -> dict[str, Any]:
        return self.store.delete(plural, key)

    def get(self, plural: str, key: str) -> dict[str, Any] | None:
        return self.store.get(plural, key)

    def compact(self) -> None:
        """Forget all history: a watch from any version seen so far gets 410 Gone."""
        self.store.compact()

    def expire_watches(self) -> None:
        """Make every open watch answer an ERROR 410 event and end (as when the watch cache is too old);
        history is compacted so that resuming from the last version seen fails too."""
        for w in self._watches:
            w.expire = True
        self.store.compact()

    def drop_watches(self) -> int:
        """Cut every open watch connection mid-stream; returns how many were cut."""
        n = 0
        for w in list(self._watches):
            if w.request.transport is not None:
                w.request.transport.close()
                n += 1
        self._watches.clear()
        return n

    def send_bookmarks(self) -> None:
        for w in self._watches:
            w.bookmark = True
        self.store.notify()

    def fail_next(self, verb: str, plural: str, times: int = 1, code: int = 500) -> None:
        """Fail the next ``times`` requests of ``verb`` (list, watch, get, create, update, patch,
        delete, bind) on ``plural`` with HTTP ``code`` (0: close the connection without answering)."""
        self._failures[verb, plural].extend([code] * times)

    def clear_failures(self) -> None:
        self._failures.clear()

    def watch_count(self) -> int:
        return len(self._watches)

    def count(self, verb: str, plural: str) -> int:
        """How many requests of ``verb`` on ``plural`` were received."""
        return sum(1 for m, p, q in self.requests if _verb(m, _parse(p), q) == verb and f"/{plural}" in p)

    # ------------------------------------------------------------------ HTTP
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        query = dict(request.query)
        self.requests.append((request.method, request.path, query))
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            return json_response(status(401, "Unauthorized", "Unauthorized"), 401)
        route = _parse(request.path)
        if route is None:
            return error_response(404, f"the server could not find the requested resource ({request.path})")
        verb = _verb(request.method, route, query)
        pending = self._failures.get((verb, route.plural))
        if pending:
            code = pending.pop(0)
            if code == 0:
                if request.transport is not None:
                    request.transport.close()
                raise asyncio.CancelledError  # nothing more to say on a cut connection
            return error_response(code, f"injected failure of {verb} {route.plural}")
        try:
            return await self._dispatch(request, route, verb, query)
        except NotFound as e:
            return error_response(404, str(e))
        except Conflict as e:
            return error_response(409, str(e))
        except BackendError as e:
            return error_response(e.code or 500, str(e))
        except (ValueError, KeyError, TypeError) as e:
            return error_response(400, f"bad request: {e}")

    async def _dispatch(self, request: web.Request, route: Route, verb: str, query: dict[str, str]
                        ) -> web.StreamResponse:
        plural, ns = route.plural, route.namespace
        namespaced = RESOURCES[_key_of(plural)]
        key = f"{ns}/{route.name}" if namespaced and route.name else (route.name or "")
        if verb == "list":
            selector = _selector(query.get("labelSelector") or "")
            fields = query.get("fieldSelector") or ""
            items = [o for o in self.store.list(plural)[0]
                     if _in_ns(o, ns) and _matches(o, selector) and _fields_match(o, fields)]
            listed: dict[str, Any] = {"resourceVersion": str(self.store.rv)}
            if query.get("limit"):  # pages: the continue token is the offset of the next one
                start, limit = int(query.get("continue") or 0), int(query["limit"])
                if start + limit < len(items):
                    listed["continue"] = str(start + limit)
                items = items[start:start + limit]
            return json_response({"kind": f"{KIND_OF[plural]}List", "apiVersion": route.api_version,
                                  "metadata": listed, "items": items})
        if verb == "watch":
            return await self._watch(request, plural, ns, query)
        if verb == "get":
            obj = self.store.get(plural, key)
            if obj is None:
                raise NotFound(f'{plural} "{route.name}" not found')
            return json_response(obj)
        if verb == "delete":
            options = await request.json() if request.can_read_body else {}
            want = ((options or {}).get("preconditions") or {}).get("uid")
            cur = self.store.get(plural, key)
            if want and cur is not None and cur["metadata"].get("uid") != want:
                raise Conflict(f"Precondition failed: UID in precondition: {want}, UID in object meta: "
                               f"{cur['metadata'].get('uid')}")
            return json_response(self.store.delete(plural, key))
        body = await request.json()
        if verb == "bind":
            return self._bind(ns or "", route.name or "", body)
        if verb == "create":
            obj = _stamped(body, namespaced=namespaced, namespace=ns)
            obj.setdefault("apiVersion", route.api_version)
            obj.setdefault("kind", KIND_OF[plural])
            return json_response(self.store.create(plural, _store_key(obj), obj), 201)
        if verb == "update":
            cur = self.store.get(plural, key)
            if cur is None:
                raise NotFound(f'{plural} "{route.name}" not found')
            if route.sub == "status":  # the status subresource changes the status alone
                body = {**cur, "status": body.get("status") or {},
                        "metadata": {**cur["metadata"], "resourceVersion": (body.get("metadata") or {}).get(
                            "resourceVersion")}}
            m = body.setdefault("metadata", {})
            expect = m.get("resourceVersion")
            for k in ("uid", "creationTimestamp", "namespace", "name"):
                if k in cur["metadata"]:
                    m[k] = cur["metadata"][k]
            return json_response(self.store.update(plural, key, body, expect_rv=expect))
        if verb == "patch":
            ctype = request.headers.get("Content-Type", "").split(";")[0].strip()
            if ctype not in MERGE_TYPES:
                return error_response(415, f"the fake API server does not support {ctype} patches")
            want = (body.get("metadata") or {}).get("uid")
            cur = self.store.get(plural, key)
            if want and cur is not None and cur["metadata"].get("uid") != want:
                raise Conflict(f"Precondition failed: UID in precondition: {want}, UID in object meta: "
                               f"{cur['metadata'].get('uid')}")
            return json_response(self.store.patch(plural, key, body))
        return error_response(405, f"{request.method} is not supported on {request.path}")

    def _bind(self, namespace: str, name: str, body: dict[str, Any]) -> web.Response:
        key = f"{namespace}/{name}"
        pod = self.store.get("pods", key)
        if pod is None:
            raise NotFound(f'pods "{name}" not found')
        node = (body.get("target") or {}).get("name")
        if not node:
            return error_response(400, "Binding target.name is required")
        bmeta = body.get("metadata") or {}
        uid = bmeta.get("uid")
        if uid and uid != pod["metadata"].get("uid"):
            raise Conflict(f'Operation cannot be fulfilled on pods/binding "{name}": uid mismatch')
        rv = bmeta.get("resourceVersion")
        if rv and rv != pod["metadata"].get("resourceVersion"):
            raise Conflict(f'Operation cannot be fulfilled on pods "{name}": the object has been modified; '
                           "please apply your changes to the latest version and try again")
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            raise Conflict(f'Operation cannot be fulfilled on pods/binding "{name}": '
                           f"pod {name} is already assigned to node \"{bound}\"")
        patch: dict[str, Any] = {"spec": {"nodeName": node}}
        if bmeta.get("annotations"):  # as the real BindingREST: copied onto the pod in the same write
            patch["metadata"] = {"annotations": dict(bmeta["annotations"])}
        self.store.patch("pods", key, patch)
        return json_response(status(201, "", ""), 201)

    async def _watch(self, request: web.Request, plural: str, ns: str | None, query: dict[str, str]
                     ) -> web.StreamResponse:
        rv_param = query.get("resourceVersion") or ""
        fields = query.get("fieldSelector") or ""
        timeout = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        deadline = None if timeout is None else time.monotonic() + timeout
        backlog: list[tuple[str, dict[str, Any]]] = []
        if rv_param in ("", "0"):
            start = self.store.rv
            backlog = [("ADDED", o) for o in self.store.list(plural)[0]
                       if _in_ns(o, ns) and _fields_match(o, fields)]
        else:
            start = int(rv_param)
            if start < self.store.compacted and self.gone_as_http:
                return error_response(410, f"too old resource version: {start} ({self.store.compacted})")
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        w = _Watch(request, resp)
        self._watches.add(w)
        try:
            for t, o in backlog:
                await _send(resp, t, o)
            while True:
                if w.expire:
                    raise Gone("watch expired")
                for ev in self.store.events_since(plural, start):
                    if _in_ns(ev.object, ns):
                        if not fields or _fields_match(ev.object, fields):
                            await _send(resp, ev.type, ev.object)
                        elif ev.type == "MODIFIED":  # it stopped matching: the real server says DELETED
                            await _send(resp, "DELETED", ev.object)
                    start = ev.rv
                start = max(start, self.store.rv)
                if w.bookmark:
                    w.bookmark = False
                    await _send(resp, "BOOKMARK", {"kind": KIND_OF[plural], "apiVersion": "v1",
                                                   "metadata": {"resourceVersion": str(start)}})
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                await self.store.wait_change(start, left)
        except Gone as e:
            with contextlib.suppress(ConnectionError):
                await _send(resp, "ERROR", status(410, "Expired", str(e)))
        except (ConnectionError, asyncio.CancelledError):
            return resp
        finally:
            self._watches.discard(w)
        with contextlib.suppress(ConnectionError):
            await resp.write_eof()
        return resp


async def _send(resp: web.StreamResponse, type_: str, obj: dict[str, Any]) -> None:
    await resp.write(json.dumps({"type": type_, "object": obj}).encode() + b"\n")


def _parse(path: str) -> Route | None:
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    ns = None
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        ns, rest = rest[1], rest[2:]
    if not rest or (group, version, rest[0]) not in RESOURCES or len(rest) > 3:
        return None
    if RESOURCES[group, version, rest[0]] is False and ns is not None:
        return None
    return Route(group, version, rest[0], ns, rest[1] if len(rest) > 1 else None,
                 rest[2] if len(rest) > 2 else None)


def _verb(method: str, route: Route | None, query: dict[str, str]) -> str:
    if route is None:
        return "unknown"
    if route.sub == "binding" and method == "POST":
        return "bind"
    if method == "GET":
        if route.name is None:
            return "watch" if query.get("watch") in ("true", "1") else "list"
        return "get"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method)


def _selector(text: str) -> dict[str, str | None]:
    """A label selector of ``key=value`` and ``key`` (exists) terms, comma-separated (the forms used here)."""
    out: dict[str, str | None] = {}
    for term in filter(None, (t.strip() for t in text.split(","))):
        key, eq, value = term.partition("=")
        out[key.strip()] = value.strip().lstrip("=") if eq else None
    return out


def _matches(obj: dict[str, Any], selector: dict[str, str | None]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return all(k in labels and (v is None or labels[k] == v) for k, v in selector.items())


def _fields_match(obj: dict[str, Any], text: str) -> bool:
    """The field selector forms used here: ``spec.nodeName=`` (unbound pods) and ``spec.nodeName=NAME``."""
    for term in filter(None, (t.strip() for t in text.split(","))):
        key, _, value = term.partition("=")
        if key == "spec.nodeName" and ((obj.get("spec") or {}).get("nodeName") or "") != value.lstrip("="):
            return False
    return True


def _key_of(plural: str) -> tuple[str, str, str]:
    return next(k for k in RESOURCES if k[2] == plural)


def _in_ns(obj: dict[str, Any], ns: str | None) -> bool:
    return ns is None or (obj.get("metadata") or {}).get("namespace") == ns


def _store_key(obj: dict[str, Any]) -> str:
    m = obj["metadata"]
    return f"{m['namespace']}/{m['name']}" if m.get("namespace") else m["name"]


def _stamped(obj: dict[str, Any], *, namespaced: bool, namespace: str | None = None) -> dict[str, Any]:
    """What the API server adds on create: uid, creationTimestamp, the namespace."""
    m = dict(obj.get("metadata") or {})
    if not m.get("name"):
        raise ValueError("metadata.name is required")
    m.setdefault("uid", str(uuid.uuid4()))
    m.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if namespaced:
        m["namespace"] = namespace or m.get("namespace") or "default"
    else:
        m.pop("namespace", None)
    return {**obj, "metadata": m}
