"""The extender's HTTP application.

``POST /filter``, ``/prioritize``, ``/bind``, ``/preempt`` (kube-scheduler's extender protocol),
``GET /inspect`` (the JSON of ``devshare inspect -o json``), ``/metrics``, ``/healthz``, ``/readyz``,
``/ui/`` (the live occupancy page) and ``/ui/occupancy`` (its JSON, :mod:`occupancy`).

A body that is not the verb's type gets HTTP 400 with a one-line message (never a 500). Logical
refusals are HTTP 200 with ``Error`` set, which kube-scheduler shows in the pod's events. Before
the state is synced, filter and bind answer ``Error: "not ready: state not synced"``, prioritize
and preempt a 503, and ``/readyz`` a 503.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from functools import lru_cache
from importlib import resources
from typing import Any

from aiohttp import web

from devshare.engine.stateview import inspect_view
from devshare.server.extender.extender import Extender, NotReady
from devshare.server.extender.metrics import ERROR, MALFORMED, NOT_READY, OK, ExtenderMetrics
from devshare.server.extender.occupancy import occupancy
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
    args = decode(body, ExtenderArgs)
    await ext.look_up_member(args)
    answer = ext.filter(args)
    return answer, (NOT_READY if answer.error.startswith("not ready") else result_of(answer))


async def _prioritize(ext: Extender, body: bytes) -> tuple[Any, str]:
    args = decode(body, ExtenderArgs)
    await ext.look_up_member(args)
    return ext.prioritize(args), OK


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


async def _inspect(request: web.Request) -> web.Response:
    ext = request.app[EXTENDER]
    if not ext.is_synced:
        return _json(_error_body("not ready: state not synced"), 503)
    view = ext.state.view()  # a copy, taken here; the JSON is built from it in a thread (0.1-0.4 s at 5,000 nodes)
    return _json(await asyncio.to_thread(lambda: encode(inspect_view(view))))


async def _ui(request: web.Request) -> web.Response:
    if not request.path.endswith("/"):  # /ui -> /ui/ so that the page's relative fetch lands under /ui/
        raise web.HTTPFound(request.path + "/")
    return web.Response(body=_ui_page(), content_type="text/html", charset="utf-8",
                        headers={"Cache-Control": "no-cache"})


@lru_cache(maxsize=1)
def _ui_page() -> bytes:
    return resources.files("devshare.server.extender").joinpath("ui.html").read_bytes()


async def _occupancy(request: web.Request) -> web.Response:
    ext = request.app[EXTENDER]
    if not ext.is_synced:
        return _json(_error_body("not ready: state not synced"), 503)
    view = ext.state.view()  # a copy, taken here: /ui asks every 2 s, and at 5,000 nodes building it takes
    return _json(await asyncio.to_thread(lambda: encode(occupancy(view))))  # most of a second


async def _metrics(request: web.Request) -> web.Response:
    return metrics_response(await request.app[EXTENDER].metrics.exposition())


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    if not request.app[EXTENDER].is_synced:
        return web.Response(status=503, text="not ready: state not synced\n")
    return web.Response(text="ok\n")


# what a caller without a verified client certificate may not reach (with client_auth)
PROTECTED = frozenset({"/filter", "/prioritize", "/bind", "/preempt", "/inspect"})
NO_CLIENT_CERT = ("a client certificate is required: configure kube-scheduler's extender tlsConfig with a "
                  "certFile/keyFile signed by the CA given to devshare as --tls-client-ca")


@web.middleware
async def _require_client_cert(request: web.Request,
                               handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    if request.path in PROTECTED and not peer_verified(request.transport):
        return _json(_error_body(f"{request.path[1:]}: {NO_CLIENT_CERT}"), 403)
    return await handler(request)


def make_app(extender: Extender, *, client_auth: bool = False) -> web.Application:
    """The application; with ``client_auth`` the verbs and /inspect answer 403 to a connection
    without a verified client certificate (probes and /metrics stay open)."""
    app = web.Application(client_max_size=MAX_BODY, middlewares=[_require_client_cert] if client_auth else [])
    app[EXTENDER] = extender
    app[VERBS] = verbs()
    for path, verb in app[VERBS].items():
        app.router.add_post(path, verb.serve)
    app.router.add_get("/inspect", _inspect)
    app.router.add_get("/ui", _ui)
    app.router.add_get("/ui/", _ui)
    app.router.add_get("/ui/occupancy", _occupancy)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app
