"""Assembling and running the extender: state + sync + (leader election) + expiry + HTTP app.

:func:`build_app` wires everything to a backend and returns the aiohttp application; its startup
hook starts the state sync, the leader election (when asked) and the expiry task, its cleanup hook
stops them (and saves a ``--cluster`` file when asked). :func:`serve` runs it until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from devshare.config import Configuration
from devshare.engine.handlers.base import Settings
from devshare.engine.policies import make_policy
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import DEFAULT_ASSUME_TTL, ClusterState
from devshare.kube.backend import Backend
from devshare.kube.leader import LeaderElector
from devshare.kube.memory import MemoryBackend
from devshare.kube.sync import StateSync
from devshare.server.extender.app import make_app
from devshare.server.extender.metrics import ExtenderMetrics
from devshare.server.extender.service import Extender

log = logging.getLogger(__name__)


@dataclass
class ExtenderOptions:
    leader_election: bool = False  # campaign for the Lease; without it this extender always binds
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    lease_name: str = "devshare-extender"
    assume_ttl: float = DEFAULT_ASSUME_TTL
    expire_interval: float = 5.0
    save: Callable[[], None] | None = None  # called after each bind and on shutdown (--save)
    freeze_after_sync: bool = False  # gc.freeze() once synced (the server process; not in tests)
    policy: str = "devshare"  # node policy: devshare (fragmentation-aware), binpack or spread
    core_weight: float = Settings.core_weight  # compute vs memory in a card's score (binpack, spread)
    # the configuration file's knobs (devshare.config); when given, it decides policy, weights and limits
    config: Configuration | None = None
    # a second, read-only listener (GET /metrics, /healthz, /readyz, /inspect, /ui) for Prometheus and
    # people, on an address the extender API itself need not be exposed on; 0: none
    metrics_port: int = 0


@dataclass
class Runtime:
    """What :func:`build_app` started; tests reach into it."""

    state: ClusterState
    sync: StateSync
    extender: Extender
    elector: LeaderElector | None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


RUNTIME = web.AppKey("runtime", Runtime)


def build_app(backend: Backend, options: ExtenderOptions | None = None) -> web.Application:
    opts = options or ExtenderOptions()
    cfg = opts.config
    if cfg is not None:
        state = cfg.state()
        settings = cfg.settings()
        scheduler = Scheduler(state, policy=cfg.policy(), settings=settings)
    else:
        state = ClusterState()
        settings = Settings(core_weight=opts.core_weight)
        scheduler = Scheduler(state, policy=make_policy(opts.policy, settings=settings), settings=settings)
    sync = StateSync(backend, state)
    elector = (LeaderElector(backend, identity=opts.identity, name=opts.lease_name)
               if opts.leader_election else None)
    metrics = ExtenderMetrics()
    extender = Extender(
        state, backend,
        scheduler=scheduler,
        is_synced=lambda: sync.is_synced,
        is_leader=(lambda: elector.is_leader) if elector is not None else (lambda: True),
        metrics=metrics,
        assume_ttl=opts.assume_ttl,
        after_bind=opts.save,
        disabled_types=cfg.device_types.disabled() if cfg is not None else frozenset(),
    )
    sync.on_change = extender.pod_changed
    metrics.watch_state(lambda: state, extender.is_synced, extender.is_leader)
    runtime = Runtime(state, sync, extender, elector)
    app = make_app(extender)
    app[RUNTIME] = runtime
    if opts.metrics_port:
        app.middlewares.append(read_only_on(opts.metrics_port))

    async def start(app: web.Application) -> None:
        runtime.tasks.append(sync.start())
        if elector is not None:
            runtime.tasks.append(asyncio.create_task(elector.run(), name="devshare-leader-election"))
        runtime.tasks.append(asyncio.create_task(extender.expire_forever(opts.expire_interval),
                                                 name="devshare-expire-reservations"))
        if opts.freeze_after_sync:
            runtime.tasks.append(asyncio.create_task(_freeze_when_synced(sync), name="devshare-gc-freeze"))

    async def stop(app: web.Application) -> None:
        for t in runtime.tasks:
            t.cancel()
        for t in runtime.tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        runtime.tasks.clear()
        if elector is not None:
            await elector.release()
        if opts.save is not None:
            opts.save()
        await backend.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app


async def _freeze_when_synced(sync: StateSync) -> None:
    """Once the first list is in, move every object alive to the collector's permanent generation:
    the cluster's objects (hundreds of thousands at 5,000 nodes) would otherwise be walked by every
    full collection, a pause of tens of milliseconds in the middle of some request."""
    await sync.synced.wait()
    gc.collect()
    gc.freeze()
    log.info("state synced; %d objects frozen out of garbage collection", gc.get_freeze_count())


READ_ONLY = ("/metrics", "/healthz", "/readyz", "/inspect", "/ui")


def read_only_on(port: int) -> Callable[..., Any]:
    """Middleware: requests that came in on ``port`` may only GET the read-only paths."""

    @web.middleware
    async def guard(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
        if sockname and sockname[1] == port:
            allowed = request.method in ("GET", "HEAD") and (
                request.path in READ_ONLY or request.path.startswith("/ui/"))
            if not allowed:
                return web.Response(status=404, text=f"not served on the read-only port {port}: "
                                    f"{', '.join(READ_ONLY)} only\n")
        response: web.StreamResponse = await handler(request)
        return response

    return guard


def serve(backend: Backend, options: ExtenderOptions | None = None, *, host: str = "127.0.0.1",
          port: int = 8888, metrics_host: str = "0.0.0.0") -> None:
    """Serve until SIGINT/SIGTERM (plain HTTP: kube-scheduler's extender config sets enableHTTPS)."""
    opts = options or ExtenderOptions()
    opts.freeze_after_sync = True
    app = build_app(backend, opts)
    extra: dict[str, Any] = {}
    if opts.metrics_port:
        sock = socket.create_server((metrics_host, opts.metrics_port), reuse_port=False)
        extra["sock"] = [sock]
    # aiohttp calls `print` once every socket is bound: "listening" is never logged for a port it failed to take
    web.run_app(app, host=host, port=port, access_log=None, **extra,
                print=lambda _: log.info("devshare extender listening on http://%s:%d%s", host, port,
                                         f" (read-only on {metrics_host}:{opts.metrics_port})"
                                         if opts.metrics_port else ""))


def cluster_saver(backend: MemoryBackend, path: Path) -> Callable[[], None]:
    """A ``save`` callback writing the memory backend's objects back to ``path`` (``--save``)."""

    def write() -> None:
        backend.save(path)

    return write
