"""The webhook's HTTP application: ``POST /validate``, ``POST /mutate``, ``POST /validate-binding``,
``/metrics``, ``/healthz``, ``/readyz``.

``CREATE`` of a Pod that asks for a managed device is judged; so is every CREATE or UPDATE of a
Pod that carries or changes an allocation annotation (only devshare's own identities may write
those: :mod:`allocations`); the CREATE of a Binding of a device pod by anyone but devshare is
refused on ``/validate-binding`` (:mod:`bindings`); every other review is allowed untouched after one
cheap check. A body
that is not an AdmissionReview gets a 400 with the reason; nothing a client sends gets a 500: a
failure inside the webhook refuses the pod on /validate (fail closed, with a message saying so)
and leaves it unchanged on /mutate, and is logged and counted as ``result="error"``.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from devshare.engine.refusals import refuse_unconfigured
from devshare.model.dra import shipped_classes
from devshare.model.errors import InvalidInput
from devshare.model.podresources import requests_devices
from devshare.server.metrics import metrics_response
from devshare.server.webhook import metrics as m
from devshare.server.webhook.allocations import (
    DEFAULT_TRADERS,
    DEFAULT_WRITERS,
    refuse_allocation_write,
    trade_partner,
)
from devshare.server.webhook.allocations import REASON as ALLOCATION_WRITE
from devshare.server.webhook.bindings import REASON as FOREIGN_BINDING
from devshare.server.webhook.bindings import is_binding, refuse_binding
from devshare.server.webhook.cluster import DeviceTypes
from devshare.server.webhook.dra_gate import ClaimSource, gate_ops, needs_gate
from devshare.server.webhook.mutate import DEFAULT_SCHEDULER, REPLACEABLE_SCHEDULERS, mutation
from devshare.server.webhook.pods import PodSource
from devshare.server.webhook.review import (
    BadReview,
    Review,
    allow,
    bad_review_body,
    deny,
    patch,
    read_review,
)
from devshare.server.webhook.validate import DEVICE_TYPE, judge, refusal, with_identity

log = logging.getLogger(__name__)

MAX_BODY = 8 * 2**20  # a Pod is at most ~1.5 MiB in etcd; leave room for the review around it
JSON = "application/json"


@dataclass
class WebhookConfig:
    scheduler_name: str = DEFAULT_SCHEDULER
    replace_schedulers: Collection[str] = REPLACEABLE_SCHEDULERS  # names not chosen "on purpose"
    cluster: DeviceTypes | None = None  # device types in the cluster; None skips that check
    disabled_types: frozenset[str] = frozenset()  # switched off by the configuration file (deviceTypes)
    disabled_dialects: frozenset[str] = frozenset()  # and dialects (dialects.mgpu: false is MGPUEnable: false)
    metrics: m.Metrics = field(default_factory=m.Metrics)
    # the usernames that may write allocation annotations (devshare's own ServiceAccounts)
    allocation_writers: Collection[str] = DEFAULT_WRITERS
    # where a Binding's pod (/validate-binding) and a trade's partner are read (the cluster connection
    # or the --cluster file); None: foreign Bindings of device pods and trades are refused
    pods: PodSource | None = None
    # the usernames that may mark pods assigned and trade allocations (the node agent)
    allocation_traders: Collection[str] = DEFAULT_TRADERS
    # DRA (issue 38): gate pods whose claims use these DeviceClasses; claims read from dra_claims
    dra: bool = True
    dra_classes: Collection[str] = field(default_factory=lambda: tuple(shipped_classes()))
    dra_claims: ClaimSource | None = None


CONFIG = web.AppKey("config", WebhookConfig)
READY = web.AppKey("ready", list)  # [bool]: a mutable cell, false while starting and draining


def _device_pod(review: Review) -> dict[str, Any] | None:
    """The pod to look at, or None when this review is not ours to judge."""
    if review.kind != "Pod" or review.operation != "CREATE" or review.sub_resource:
        return None
    pod = review.object
    if not isinstance(pod, dict):
        return None
    try:
        if not requests_devices(pod):
            return None
    except InvalidInput:
        pass  # unreadable resources: let validation say what is wrong
    return with_identity(pod, review.namespace, review.name)


Decide = Callable[[Review, WebhookConfig, Any], tuple[bytes, str] | Awaitable[tuple[bytes, str]]]
Prepare = Callable[[Review, WebhookConfig], Awaitable[Any]]


async def _review(request: web.Request, op: str, decide: Decide, on_error: Callable[[Review, Exception], bytes],
                  prepare: Prepare | None = None) -> web.Response:
    """Read the AdmissionReview (400 if malformed), decide, count and time it. A failure inside the
    decision is logged and answered by ``on_error`` (never a 500)."""
    config = request.app[CONFIG]
    started = time.perf_counter()
    try:
        review = read_review(await request.read())
    except BadReview as e:
        config.metrics.reviews.labels(op, m.MALFORMED).inc()
        return web.Response(status=400, body=bad_review_body(e), content_type=JSON)
    try:
        decided = decide(review, config, await prepare(review, config) if prepare is not None else None)
        body, result = await decided if inspect.isawaitable(decided) else decided
    except Exception as e:
        log.exception("%s of %s/%s (uid %s) failed", op, review.namespace, review.name, review.uid)
        body, result = on_error(review, e), m.ERROR
    config.metrics.reviews.labels(op, result).inc()
    config.metrics.latency.labels(op).observe(time.perf_counter() - started)
    return web.Response(body=body, content_type=JSON)


async def _trade_partners(review: Review, config: WebhookConfig) -> list[dict[str, Any]] | None:
    """The pods of the namespace on the pod's node, when this is a node agent's trade write."""
    if review.kind != "Pod" or review.sub_resource or config.pods is None:
        return None
    if trade_partner(review.operation, review.username, review.object, review.old_object,
                     config.allocation_traders) is None:
        return None
    return await config.pods.list_node_pods(review.namespace, str(review.object["spec"]["nodeName"]))


def _decide_validate(review: Review, config: WebhookConfig, partners: Any) -> tuple[bytes, str]:
    if review.kind == "Pod" and not review.sub_resource:
        refused = refuse_allocation_write(review.operation, review.username, review.object, review.old_object,
                                          config.allocation_writers, config.allocation_traders, partners)
        if refused:
            config.metrics.rejections.labels(ALLOCATION_WRITE).inc()
            return deny(review, f"devshare: pod {_pod_name(review)}: {refused}"), m.DENIED
    pod = _device_pod(review)
    if pod is None:
        unconfigured = _unconfigured(review, config)
        if unconfigured:
            config.metrics.rejections.labels(DEVICE_TYPE).inc()
            return deny(review, f"devshare: {unconfigured}"), m.DENIED
        return allow(review), m.SKIPPED
    problems = judge(pod, config.cluster, config.disabled_types, config.disabled_dialects)
    if not problems:
        return allow(review), m.ALLOWED
    for reason in {p.reason for p in problems}:
        config.metrics.rejections.labels(reason).inc()
    return deny(review, refusal(problems)), m.DENIED


def _unconfigured(review: Review, config: WebhookConfig) -> str | None:
    """A pod CREATE asking no device devshare reads may still ask for a type some node has (its
    Device objects) that no dialect reads: refused, rather than placed reserving nothing."""
    if review.kind != "Pod" or review.operation != "CREATE" or review.sub_resource or config.cluster is None:
        return None
    return refuse_unconfigured(review.object, config.cluster.known_types())


def _pod_name(review: Review) -> str:
    m = with_identity(review.object, review.namespace, review.name)["metadata"]
    return f"{m['namespace']}/{m['name']}"


async def _decide_binding(review: Review, config: WebhookConfig, _: Any) -> tuple[bytes, str]:
    if not is_binding(review.kind, review.operation, review.sub_resource):
        return allow(review), m.SKIPPED
    refused = await refuse_binding(review.object, review.namespace, review.name, review.username,
                                   config.allocation_writers, config.pods, config.scheduler_name)
    if refused is None:
        return allow(review), m.ALLOWED
    config.metrics.rejections.labels(FOREIGN_BINDING).inc()
    return deny(review, f"devshare: {refused}"), m.DENIED


def _validate_failed(review: Review, e: Exception) -> bytes:
    return deny(
        review,
        f"devshare could not check this pod (internal error: {type(e).__name__}); the webhook's log has the details",
        code=500,
        reason="InternalError",
    )


async def _dra_gate(review: Review, config: WebhookConfig) -> str | None:
    """DRA (issue 38): why the pod must wait for devshare's allocator (None: it need not)."""
    if not config.dra or review.kind != "Pod" or review.operation != "CREATE" or review.sub_resource:
        return None
    if not isinstance(review.object, dict):
        return None
    return await needs_gate(with_identity(review.object, review.namespace, review.name), config.dra_claims,
                            config.dra_classes)


def _decide_mutate(review: Review, config: WebhookConfig, gate: Any) -> tuple[bytes, str]:
    pod = _device_pod(review)
    if pod is None and not gate:
        return allow(review), m.SKIPPED
    ops: list[dict[str, Any]] = []
    warnings: list[str] = []
    if pod is not None:
        ops, warnings = mutation(pod, scheduler_name=config.scheduler_name,
                                 replace_schedulers=config.replace_schedulers)
    if gate:  # DRA (issue 38)
        ops += gate_ops(review.object)
        warnings.append(f"devshare holds the pod until it allocates its claims: {gate}")
    return patch(review, ops, warnings), (m.PATCHED if ops else m.ALLOWED)


def _mutate_failed(review: Review, e: Exception) -> bytes:
    return allow(review, [f"devshare left this pod unchanged (internal error: {type(e).__name__})"])


async def _validate(request: web.Request) -> web.Response:
    return await _review(request, "validate", _decide_validate, _validate_failed, _trade_partners)


async def _validate_binding(request: web.Request) -> web.Response:
    return await _review(request, "validate-binding", _decide_binding, _binding_failed)


def _binding_failed(review: Review, e: Exception) -> bytes:
    return deny(review, f"devshare could not check this Binding (internal error: {type(e).__name__}); the "
                "webhook's log has the details", code=500, reason="InternalError")


async def _mutate(request: web.Request) -> web.Response:
    return await _review(request, "mutate", _decide_mutate, _mutate_failed, _dra_gate)


async def _metrics(request: web.Request) -> web.Response:
    return metrics_response(request.app[CONFIG].metrics.render())


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def _readyz(request: web.Request) -> web.Response:
    if not request.app[READY][0]:
        return web.Response(status=503, text="not ready: starting or shutting down\n")
    return web.Response(text="ok\n")


async def _on_startup(app: web.Application) -> None:
    source = app[CONFIG].cluster
    start = getattr(source, "start", None)
    if start is not None:
        await start()  # a live source (--kubeconfig) begins following the cluster's Device objects
    app[READY][0] = True


async def _on_shutdown(app: web.Application) -> None:
    app[READY][0] = False
    stop = getattr(app[CONFIG].cluster, "stop", None)
    if stop is not None:
        await stop()


def make_app(config: WebhookConfig | None = None) -> web.Application:
    """The aiohttp application (serve it over TLS: the API server only calls webhooks over HTTPS)."""
    app = web.Application(client_max_size=MAX_BODY)
    app[CONFIG] = config or WebhookConfig()
    app[READY] = [False]
    app.router.add_post("/validate", _validate)
    app.router.add_post("/mutate", _mutate)
    app.router.add_post("/validate-binding", _validate_binding)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    app.on_startup.append(_on_startup)
    app.on_shutdown.append(_on_shutdown)
    return app
