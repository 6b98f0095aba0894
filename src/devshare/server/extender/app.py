"""The extender's HTTP application.

``POST /filter``, ``/prioritize``, ``/bind``, ``/preempt`` (kube-scheduler's extender protocol),
``GET /inspect`` (the JSON of ``devshare inspect -o json``), ``/metrics``, ``/healthz``, ``/readyz``,
``/ui/`` (the live occupancy page; ``/`` leads there) and ``/ui/occupancy`` (its JSON, :mod:`occupancy`).
/inspect and /ui/occupancy are answered from one shared snapshot (:mod:`snapshot`), rebuilt at most
once per interval off the event loop: an open page never makes a verb wait.

A body that is not the verb's type gets HTTP 400 with a one-line message (never a 500). Logical
refusals are HTTP 200 with ``Error`` set, which kube-scheduler shows in the pod's events. Before
the state is synced, filter and bind answer ``Error: "not ready: state not synced"``, prioritize
and preempt a 503, and ``/readyz`` a 503.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import lru_cache
from importlib import resources
from typing import Any

from aiohttp import web

from devshare.config import Configuration
from devshare.server.extender.extender import Extender
from devshare.server.extender.filtering import NotReady
from devshare.server.extender.history import History
from devshare.server.extender.metrics import ERROR, MALFORMED, NOT_READY, OK, ExtenderMetrics
from devshare.server.extender.page import config_summary
from devshare.server.extender.snapshot import Body, Busy, ReadSurface
from devshare.server.extender.wire import (
    TOO_DEEP,
    BadRequest,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    decode,
    encode,
)
from devshare.server.metrics import metrics_response
from devshare.server.tls import peer_verified

log = logging.getLogger(__name__)

MAX_BODY = 64 * 2**20  # a full NodeList of thousands of nodes is large
JSON = "application/json"

EXTENDER = web.AppKey("extender", Extender)
VERBS = web.AppKey("verbs", dict)  # path -> Verb (:func:`verbs`)
SURFACE = web.AppKey("read_surface", ReadSurface)

Handler = Callable[[Extender, bytes], Awaitable[tuple[Any, str]]]


def _json(value: Any, status: int = 200) -> web.Response:
    body = value if isinstance(value, bytes) else encode(value)  # bytes: encoded already
    return web.Response(body=body, status=status, content_type=JSON)


def _error_body(message: str) -> dict[str, str]:
    return {"error": message}


class Verb:
    """One verb of kube-scheduler's extender protocol: its body in, its status and JSON answer out,
    counted in the extender's metrics. The one owner of how a verb answers, whichever server took the
    request (aiohttp's route below, or the lane of :mod:`devshare.server.extender.lane`)."""

    def __init__(self, name: str, handler: Handler) -> None:
        self.name = name
        self.handler = handler
        self._counted: dict[tuple[int, str], Any] = {}  # (registry, result) -> its counters, looked up once

    async def answer(self, ext: Extender, body: bytes) -> tuple[int, bytes]:
        """The HTTP status and the JSON body answering ``body``; never raises (but for cancellation)."""
        name = self.name
        started = time.perf_counter()
        status = 200
        try:
            answer, result = await self.handler(ext, body)
            out = answer if isinstance(answer, bytes) else encode(answer)  # bytes: encoded already
        except BadRequest as e:
            result, status, out = MALFORMED, 400, _error_json(f"{name}: {e}")
        except UnicodeDecodeError as e:  # msgspec reads JSON strings as UTF-8
            result, status = MALFORMED, 400
            out = _error_json(f"{name}: body is not valid UTF-8 ({e}): JSON text must be UTF-8")
        except RecursionError:  # a body decoded fine but too deep for what walks it later
            result, status, out = MALFORMED, 400, _error_json(f"{name}: {TOO_DEEP}")
        except NotReady as e:
            result, status, out = NOT_READY, 503, _error_json(str(e))
        except Exception as e:  # a bug: say so without a stack trace on the wire
            log.exception("%s failed", name)
            result, status = "internal", 500
            out = _error_json(f"{name} failed inside devshare ({type(e).__name__}); see its log")
        took = time.perf_counter() - started
        metrics: ExtenderMetrics = ext.metrics
        key = (id(metrics), result)
        children = self._counted.get(key)
        if children is None:  # prometheus_client's labels() is a lock and a dict lookup on tuples each time
            children = self._counted[key] = (metrics.requests.labels(name, result), metrics.latency.labels(name),
                                             metrics)
        children[0].inc()
        children[1].observe(took)
        return status, out

    async def serve(self, request: web.Request) -> web.Response:
        """The verb as an aiohttp route."""
        status, out = await self.answer(request.app[EXTENDER], await request.read())
        return web.Response(body=out, status=status, content_type=JSON)


def _error_json(message: str) -> bytes:
    return encode(_error_body(message))


def result_of(answer: ExtenderFilterResult | ExtenderBindingResult) -> str:
    return ERROR if answer.error else OK


async def _filter(ext: Extender, body: bytes) -> tuple[Any, str]:
    answer = await ext.filtering.filter(decode(body, ExtenderArgs))
    return answer, (NOT_READY if answer.error.startswith("not ready") else result_of(answer))


async def _prioritize(ext: Extender, body: bytes) -> tuple[Any, str]:
    return await ext.filtering.prioritize(decode(body, ExtenderArgs)), OK


async def _bind(ext: Extender, body: bytes) -> tuple[Any, str]:
    answer = await ext.bind(decode(body, ExtenderBindingArgs))
    return answer, result_of(answer)


async def _preempt(ext: Extender, body: bytes) -> tuple[Any, str]:
    return ext.preempt(decode(body, ExtenderPreemptionArgs)), OK


def verbs() -> dict[str, Verb]:
    """The verbs by path, for one application: served by its aiohttp routes and its lane alike."""
    return {
        "/filter": Verb("filter", _filter),
        "/prioritize": Verb("prioritize", _prioritize),
        "/bind": Verb("bind", _bind),
        "/preempt": Verb("preempt", _preempt),
    }


async def _snapshot(request: web.Request, answer: Callable[[ReadSurface], Awaitable[Body]]) -> web.Response:
    """An answer of the read surface's shared snapshot (gzipped for a client that accepts it): 503
    before the state is synced or while too many requests wait for its build."""
    if not request.app[EXTENDER].is_synced:
        return _json(_error_body("not ready: state not synced"), 503)
    try:
        body = await answer(request.app[SURFACE])
        if body.gz is not None and "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(body=body.gz, content_type=JSON,
                                headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
        return web.Response(body=body.raw, content_type=JSON, headers={"Vary": "Accept-Encoding"})
    except Busy as e:
        response = _json(_error_body(f"{request.path[1:]}: {e}"), 503)
        response.headers["Retry-After"] = "1"
        return response


async def _inspect(request: web.Request) -> web.Response:
    return await _snapshot(request, lambda surface: surface.inspect())


async def _root(request: web.Request) -> web.Response:
    raise web.HTTPFound("/ui/")


async def _ui(request: web.Request) -> web.Response:
    if not request.path.endswith("/"):  # /ui -> /ui/ so that the page's relative fetch lands under /ui/
        raise web.HTTPFound(request.path + "/")
    return web.Response(body=_ui_page(), content_type="text/html", charset="utf-8",
                        headers={"Cache-Control": "no-cache"})


@lru_cache(maxsize=1)
def _ui_page() -> bytes:
    return resources.files("devshare.server.extender").joinpath("ui.html").read_bytes()


async def _occupancy(request: web.Request) -> web.Response:
    q = request.query.get("q", "")[:256]  # the page's filter: nodes or holders whose name holds it
    return await _snapshot(request, lambda surface: surface.occupancy(q))


async def _metrics(request: web.Request) -> web.Response:
    return metrics_response(await request.app[EXTENDER].metrics.exposition())


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    if not request.app[EXTENDER].is_synced:
        return web.Response(status=503, text="not ready: state not synced\n")
    return web.Response(text="ok\n")


# what a caller without a verified client certificate may not reach (with client_auth): the verbs,
# and what shows pods and their use (/inspect, the /ui page and its JSON)
PROTECTED = frozenset({"/filter", "/prioritize", "/bind", "/preempt", "/inspect", "/ui"})


def protected(path: str) -> bool:
    return path in PROTECTED or path.startswith("/ui/")
NO_CLIENT_CERT = ("a client certificate is required: configure kube-scheduler's extender tlsConfig with a "
                  "certFile/keyFile signed by the CA given to devshare as --tls-client-ca")


@web.middleware
async def _require_client_cert(request: web.Request,
                               handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    if protected(request.path) and not peer_verified(request.transport):
        return _json(_error_body(f"{request.path[1:]}: {NO_CLIENT_CERT}"), 403)
    return await handler(request)


def make_app(extender: Extender, *, client_auth: bool = False, config: Configuration | None = None,
             surface: ReadSurface | None = None) -> web.Application:
    """The application; with ``client_auth`` the verbs, /inspect and /ui answer 403 to a connection
    without a verified client certificate (probes and /metrics stay open). ``config``: the active
    configuration /ui shows; ``surface``: the read surface (tests give one with their own clock)."""
    app = web.Application(client_max_size=MAX_BODY, middlewares=[_require_client_cert] if client_auth else [])
    app[EXTENDER] = extender
    app[VERBS] = verbs()
    app[SURFACE] = surface or ReadSurface(extender, History(extender.state, time.time), config_summary(config))
    app.cleanup_ctx.append(_history)
    for path, verb in app[VERBS].items():
        app.router.add_post(path, verb.serve)
    app.router.add_get("/", _root)
    app.router.add_get("/inspect", _inspect)
    app.router.add_get("/ui", _ui)
    app.router.add_get("/ui/", _ui)
    app.router.add_get("/ui/occupancy", _occupancy)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app


async def _history(app: web.Application) -> AsyncIterator[None]:
    """The allocation history's sampling, while the application runs."""
    surface = app[SURFACE]
    extender = app[EXTENDER]
    task = asyncio.create_task(surface.history.run(lambda: extender.is_synced), name="devshare-ui-history")
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    surface.close()
