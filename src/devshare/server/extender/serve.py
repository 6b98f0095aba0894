"""Assembling and running the extender: state + sync + (leader election) + expiry + HTTP app.

:func:`build_app` wires everything to a backend and returns the aiohttp application; its startup
hook starts the state sync, the leader election (when asked) and the expiry task, its cleanup hook
stops them (and saves a ``--cluster`` file when asked). :func:`serve` runs it until SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import ipaddress
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from ssl import SSLContext
from typing import Any

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from devshare.config import Configuration, refuse_pod
from devshare.engine.handlers.base import Settings
from devshare.engine.policies import make_policy
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import DEFAULT_ASSUME_TTL, ClusterState
from devshare.kube.backend import Backend
from devshare.kube.leader import LeaderElector, LeaseFollower
from devshare.kube.ledger import ClaimLedger
from devshare.kube.memory import MemoryBackend
from devshare.kube.persist import SnapshotWriter
from devshare.kube.sync import StateSync
from devshare.server.eventloop import StallWatch, new_event_loop
from devshare.server.extender.app import VERBS, make_app
from devshare.server.extender.claims import Claims, replica_identity
from devshare.server.extender.lane import Lanes
from devshare.server.extender.metrics import ExtenderMetrics
from devshare.server.extender.requeue import FREED_AT
from devshare.server.extender.service import Extender
from devshare.server.tls import CertReloader, TLSCollector
from devshare.server.webhook.mutate import DEFAULT_SCHEDULER

log = logging.getLogger(__name__)


@dataclass
class ExtenderOptions:
    leader_election: bool = False  # campaign for the Lease; without it this extender always binds
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    lease_name: str = "devshare-extender"
    lease_timing: tuple[float, float, float] | None = None  # (duration, renew deadline, retry period); tests
    # follow the Lease of the kube-scheduler in this pod instead of electing a leader of its own:
    # the Lease's name (in the namespace devshare runs in) and this pod's name (the downward API)
    follow_lease: str | None = None
    pod_name: str = ""
    follow_period: float = 1.0  # seconds between two reads of the followed Lease
    assume_ttl: float = DEFAULT_ASSUME_TTL
    expire_interval: float = 5.0
    save: SnapshotWriter | None = None  # asked to write after each bind, flushed on shutdown (--save)
    freeze_after_sync: bool = False  # gc.freeze() once synced (the server process; not in tests)
    policy: str = "devshare"  # node policy: devshare (fragmentation-aware), binpack or spread
    core_weight: float = Settings.core_weight  # compute vs memory in a card's score (binpack, spread)
    # the configuration file's knobs (devshare.config); when given, it decides policy, weights and limits
    config: Configuration | None = None
    # a second, read-only listener (GET /metrics, /healthz, /readyz, /inspect, /ui) for Prometheus and
    # people, on an address the extender API itself need not be exposed on; 0: none
    metrics_port: int = 0
    client_auth: bool = False  # verbs and /inspect need a verified client certificate (--tls-client-ca)
    # the spec.schedulerName of the kube-scheduler profile this extender serves: its pending pods are
    # kept from the watch for bind (StateSync.pending_pod) and nudged when devices free up (requeue.py)
    scheduler_name: str = DEFAULT_SCHEDULER
    # the event loop the server runs on (devshare.server.eventloop): auto (uvloop), uvloop or asyncio
    event_loop: str = "auto"
    # record each pod's claim in the claim ledger (one ConfigMap, written in batches) before its Binding, so
    # that two replicas binding at once never over-book a card (docs/deploy.md, "Several replicas")
    claim_ledger: bool = True
    # serve kube-scheduler's verbs off the socket on a plain-HTTP port (devshare.server.extender.lane);
    # False: every request through aiohttp
    lane: bool = True


@dataclass
class Runtime:
    """What :func:`build_app` started; tests reach into it."""

    state: ClusterState
    sync: StateSync
    extender: Extender
    elector: LeaderElector | LeaseFollower | None
    claims: Claims | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    stalls: StallWatch = field(default_factory=lambda: StallWatch("extender"))


RUNTIME = web.AppKey("runtime", Runtime)


def build_app(backend: Backend, options: ExtenderOptions | None = None) -> web.Application:
    opts = options or ExtenderOptions()
    cfg = opts.config
    if cfg is not None:
        cfg.register()
        state = cfg.state()
        settings = cfg.settings()
        scheduler = Scheduler(state, policy=cfg.policy(), settings=settings, quotas=cfg.namespace_quotas())
    else:
        state = ClusterState()
        settings = Settings(core_weight=opts.core_weight)
        scheduler = Scheduler(state, policy=make_policy(opts.policy, settings=settings), settings=settings)
    sync = StateSync(backend, state, scheduler_name=opts.scheduler_name)
    off_dialects = cfg.disabled_dialects() if cfg is not None else frozenset()
    timing = dict(zip(("lease_duration", "renew_deadline", "retry_period"), opts.lease_timing or (), strict=False))
    elector: LeaderElector | LeaseFollower | None = None
    if opts.follow_lease:
        elector = LeaseFollower(backend, pod_name=opts.pod_name, name=opts.follow_lease,
                                retry_period=opts.follow_period)
    elif opts.leader_election:
        elector = LeaderElector(backend, identity=opts.identity, name=opts.lease_name, **timing)
    metrics = ExtenderMetrics()
    extender = Extender(
        state, backend,
        scheduler=scheduler,
        is_synced=lambda: sync.is_synced,
        is_leader=elector.may_write if elector is not None else (lambda: True),
        metrics=metrics,
        assume_ttl=opts.assume_ttl,
        after_bind=opts.save.request if opts.save is not None else None,
        disabled_types=cfg.device_types.disabled() if cfg is not None else frozenset(),
        pod_exists=sync.pod_exists,
        group_exists=sync.group_exists,
        note_pod=sync.note_pod,
        shortlist=cfg.scheduling.shortlist if cfg is not None else 0,
        pending_pod=sync.pending_pod,
        refuse=lambda pod, _: refuse_pod(pod, disabled_dialects=off_dialects, device_types=frozenset(state.tables)),
        scheduler_name=opts.scheduler_name,
    )
    sync.on_change = extender.pod_changed
    claims: Claims | None = None
    if opts.claim_ledger:
        claims = Claims(ClaimLedger(backend), state, identity=replica_identity(opts.pod_name or opts.identity),
                        ttl=opts.assume_ttl, note_pod=sync.note_pod,
                        watch_version=lambda: sync.resource_versions.get("pods"), uncounted=sync.uncounted)
        extender.writes.claims = claims
        sync.after_pods_listed = claims.load
        metrics.registry.register(_ClaimsCollector(claims))
    if elector is not None:
        extender.writes.fence = elector.check  # awaited just before each bind's write
    stop_at = os.environ.get(SIGSTOP_HOOK)
    if stop_at:
        extender.writes.before_claim = _stop_before_claim_of(stop_at)
    metrics.watch_state(lambda: state, extender.is_synced, extender.is_leader)
    metrics.registry.register(_SyncCollector(sync))
    metrics.registry.register(_RequeueCollector(extender))
    if opts.save is not None:
        metrics.registry.register(_SaveCollector(opts.save))
    runtime = Runtime(state, sync, extender, elector, claims)
    metrics.registry.register(_StallCollector(runtime.stalls))
    app = make_app(extender, client_auth=opts.client_auth)
    app[RUNTIME] = runtime
    if opts.metrics_port:
        app.middlewares.append(read_only_on(opts.metrics_port))

    async def start(app: web.Application) -> None:
        runtime.tasks.append(sync.start())
        if elector is not None:
            runtime.tasks.append(asyncio.create_task(elector.run(), name="devshare-leader-election"))
        runtime.tasks.append(asyncio.create_task(extender.expire_forever(opts.expire_interval),
                                                 name="devshare-expire-reservations"))
        runtime.tasks.append(asyncio.create_task(extender.requeue.run(), name="devshare-requeue"))
        runtime.tasks.append(asyncio.create_task(runtime.stalls.run(), name="devshare-stall-watch"))
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
            await opts.save.close()
        await backend.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app


# A test hook (tests/e2e/test_replicas.py): the extender stops itself (SIGSTOP) when it is about to claim
# devices for this pod (``namespace/name``), after its leader fence, as a replica paused there would be.
SIGSTOP_HOOK = "DEVSHARE_TEST_SIGSTOP_BEFORE_CLAIM"


def _stop_before_claim_of(key: str) -> Callable[[str], None]:
    def hook(pod: str) -> None:
        if pod == key:
            log.warning("%s: stopping before the claim of pod %s", SIGSTOP_HOOK, pod)
            os.kill(os.getpid(), signal.SIGSTOP)

    return hook


# the cyclic garbage collector's thresholds once synced (gc.set_threshold: allocations before a young
# collection, young collections before a middle one, middle ones before a full one); Python's own are
# (700, 10, 10)
GC_THRESHOLDS = (5000, 20, 100)


async def _freeze_when_synced(sync: StateSync) -> None:
    """Once the first list is in, move every object alive to the collector's permanent generation:
    the cluster's objects (hundreds of thousands at 5,000 nodes) would otherwise be walked by every
    full collection, a pause of tens of milliseconds in the middle of some request.

    Then make full collections rare (:data:`GC_THRESHOLDS`). Python runs one after every ten middle
    collections unless the objects promoted since the last are under a quarter of those it kept;
    once the cluster is frozen that quarter is of almost nothing, so at 5,000 nodes and 100 pods per
    second a full collection ran every 1-2 s. Measured in a 3,000-pod phase of bench_e2e.py: 15 of
    them, 87-144 ms each (growing with the pods seen since the freeze), 1.7-2.1 s in all, collecting
    nothing (the extender makes no cyclic garbage in its steady state); each one stops every request,
    and kube-scheduler, which waits for each filter, with them. With these thresholds: none while the
    same kind of phase's pods were scheduled (one, of 31-40 ms, when they were deleted after it), and
    92 ms of young and middle collections in all. Full collections still run (one per 2,000 young
    ones): a cycle of garbage is collected later, never kept."""
    await sync.synced.wait()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
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
          port: int = 8888, metrics_host: str = "0.0.0.0", tls: CertReloader | None = None) -> None:
    """Serve until SIGINT/SIGTERM: over TLS with ``tls`` (kube-scheduler's extender config sets
    ``enableHTTPS`` and its ``tlsConfig``), plain HTTP otherwise (with the verbs' lane unless
    ``options.lane`` is off)."""
    opts = options or ExtenderOptions()
    opts.freeze_after_sync = True
    opts.client_auth = tls is not None and tls.client_ca is not None
    app = build_app(backend, opts)
    if tls is not None:
        app[RUNTIME].extender.metrics.registry.register(TLSCollector(tls))
    scheme = "https" if tls is not None else "http"
    metrics_sock = None
    if opts.metrics_port:
        metrics_sock = socket.create_server((metrics_host, opts.metrics_port), reuse_port=False)

    def listening() -> None:  # logged once every socket is bound: never for a port it failed to take
        log.info("devshare extender listening on %s://%s:%d%s%s%s", scheme, host, port,
                 f" (read-only on {metrics_host}:{opts.metrics_port})" if opts.metrics_port else "",
                 " (client certificates required)" if opts.client_auth else "",
                 "" if tls is not None or not opts.lane else " (kube-scheduler's verbs in the lane)")

    loop = new_event_loop(opts.event_loop)
    main = loop.create_task(_run(app, host, port, tls.context if tls is not None else None, metrics_sock,
                                 lane=opts.lane, listening=listening))
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:  # as aiohttp's run_app ends
        try:
            if not main.done():
                main.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    loop.run_until_complete(main)
        finally:
            rest = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in rest:
                t.cancel()
            if rest:
                loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()


async def _run(app: web.Application, host: str, port: int, ssl: SSLContext | None, metrics_sock: socket.socket | None,
               *, lane: bool, listening: Callable[[], None]) -> None:
    """Serve ``app`` (:func:`serving`) until cancelled or until SIGINT/SIGTERM (aiohttp's runner then
    raises ``GracefulExit``)."""
    async with serving(app, host, port, ssl=ssl, metrics_sock=metrics_sock, lane=lane, handle_signals=True):
        listening()
        while True:
            await asyncio.sleep(3600)


@dataclass
class Serving:
    port: int  # the port bound (the one asked, or the one the system chose for 0)
    lanes: Lanes | None  # the verbs' lane, when it serves the port


@contextlib.asynccontextmanager
async def serving(app: web.Application, host: str, port: int, *, ssl: SSLContext | None = None,
                  metrics_sock: socket.socket | None = None, lane: bool = True,
                  handle_signals: bool = False) -> AsyncIterator[Serving]:
    """``app`` served on ``host:port`` (and the read-only ``metrics_sock``) while in the block. On a
    plain-HTTP port with ``lane``, each connection starts in the verbs' lane
    (:mod:`devshare.server.extender.lane`), which hands it to aiohttp's handler for anything but
    kube-scheduler's verbs; over TLS, and on the read-only port, every request goes through aiohttp."""
    runner = web.AppRunner(app, handle_signals=handle_signals, access_log=None)
    await runner.setup()
    lanes: Lanes | None = None
    collector: _LaneCollector | None = None
    server: asyncio.AbstractServer | None = None
    try:
        if lane and ssl is None:
            assert runner.server is not None
            lanes = Lanes(app[VERBS], app[RUNTIME].extender, runner.server)
            collector = _LaneCollector(lanes)
            app[RUNTIME].extender.metrics.registry.register(collector)
            server = await asyncio.get_running_loop().create_server(lanes, host, port, reuse_address=True)
            bound = server.sockets[0].getsockname()[1]
        else:
            site = web.TCPSite(runner, host, port, ssl_context=ssl)
            await site.start()
            bound = runner.addresses[-1][1]
        if metrics_sock is not None:
            await web.SockSite(runner, metrics_sock).start()
        yield Serving(bound, lanes)
    finally:
        if server is not None:
            server.close()
        if lanes is not None:
            await lanes.shutdown()
        if collector is not None:
            app[RUNTIME].extender.metrics.registry.unregister(collector)
        await runner.cleanup()


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def listen_check(host: str, *, tls: bool, insecure: bool) -> str | None:
    """Whether the extender may listen on ``host``: raises ValueError on a non-loopback address
    without TLS and client certificates (whoever reaches /bind can bind any pod anywhere), unless
    ``insecure``; then returns the warning to log."""
    if tls or is_loopback(host):
        return None
    if not insecure:
        raise ValueError(
            f"refusing to listen on {host} without TLS: anyone who reaches it could bind pods. Give "
            "--tls-cert, --tls-key and --tls-client-ca (the CA of kube-scheduler's client certificate, "
            "its extender tlsConfig certFile/keyFile), listen on 127.0.0.1 beside kube-scheduler, or "
            "pass --insecure to accept the risk"
        )
    return (f"INSECURE: listening on {host} in plain HTTP without client authentication (--insecure): "
            "anyone who reaches this port can filter, bind and preempt pods")


def cluster_saver(backend: MemoryBackend, path: Path, *, delay: float = 0.5) -> SnapshotWriter:
    """The ``save`` of ``--save``: the memory backend's objects written back to ``path``, atomically,
    off the event loop, at most once per ``delay`` seconds (:mod:`devshare.kube.persist`)."""
    return SnapshotWriter(backend.snapshot, path, delay=delay)


class _SaveCollector(Collector):
    def __init__(self, saver: SnapshotWriter) -> None:
        self.saver = saver

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("devshare_extender_saves", "Writes of the --save file.", value=self.saver.writes)
        yield CounterMetricFamily("devshare_extender_save_failures",
                                  "Failed writes of the --save file (the previous file is kept).",
                                  value=self.saver.failures)


class _LaneCollector(Collector):
    """What the verbs' lane served itself, and the connections it handed to aiohttp (lane.py)."""

    def __init__(self, lanes: Lanes) -> None:
        self.lanes = lanes

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("devshare_extender_lane_requests", "Verb requests read and answered by the lane, "
                                  "without aiohttp.", value=self.lanes.served)
        yield CounterMetricFamily("devshare_extender_lane_handovers",
                                  "Connections the lane handed to aiohttp at a request that was not a verb as "
                                  "kube-scheduler sends it.", value=self.lanes.handed)


class _RequeueCollector(Collector):
    """Pods nudged after devices were freed (server/extender/requeue.py)."""

    def __init__(self, extender: Extender) -> None:
        self.extender = extender

    def collect(self) -> Iterator[Metric]:
        requeue = self.extender.requeue
        yield CounterMetricFamily(
            "devshare_extender_requeue_nudges",
            f"Pods refused for devices in use that were annotated {FREED_AT} when devices were freed, so that "
            "kube-scheduler tries them again.", value=requeue.nudged)
        yield CounterMetricFamily("devshare_extender_requeue_failures",
                                  "Nudges of refused pods that failed (logged).", value=requeue.failures)


class _StallCollector(Collector):
    """The moments the event loop ran nothing for a second or more (devshare.server.eventloop)."""

    def __init__(self, stalls: StallWatch) -> None:
        self.stalls = stalls

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("devshare_extender_loop_stalls", "Times the event loop ran nothing for a second "
                                  "or more (each logged): every request waited meanwhile.", value=self.stalls.stalls)
        yield CounterMetricFamily("devshare_extender_loop_stalled_seconds", "Seconds of those stalls.",
                                  value=self.stalls.stalled_seconds)


class _SyncCollector(Collector):
    """The state sync's counters of allocations found on pods and not counted."""

    def __init__(self, sync: StateSync) -> None:
        self.sync = sync

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "devshare_extender_overbooked_allocations",
            "Allocations found on bound pods that would have booked a card beyond its compute or memory: "
            "refused and not counted (a DeviceOverbooked Event on the pod).", value=self.sync.overbooked)
        yield CounterMetricFamily(
            "devshare_extender_malformed_allocations",
            "Bound pods whose allocation annotation could not be used (unreadable, or naming another node).",
            value=self.sync.malformed)
        trades = self.sync.trades
        yield CounterMetricFamily(
            "devshare_extender_trades", "Trades of the node agents (identical pods exchanging allocations) "
            "applied as exact exchanges.", value=trades.exchanged)
        yield CounterMetricFamily(
            "devshare_extender_trade_writes_alone", "Trade writes applied alone, through the over-booking check "
            "(their partner's write late, gone, or not an exact exchange).", value=trades.unpaired)
        yield GaugeMetricFamily(
            "devshare_extender_trade_writes_parked", "Trade writes waiting for their partner's.",
            value=len(trades.parked))


class _ClaimsCollector(Collector):
    """The claim ledger's writes, conflicts and refusals."""

    def __init__(self, claims: Claims) -> None:
        self.claims = claims

    def collect(self) -> Iterator[Metric]:
        c = self.claims.counters
        for name, value, doc in (
            ("writes", c.writes, "Writes of the claim ledger that went through (claims, withdrawals, prunings)."),
            ("conflicts", c.conflicts, "Ledger writes answered 409 (another replica wrote first): read again."),
            ("refused", c.refused, "Binds refused: the pod did not fit beside the claims in the ledger."),
            ("withdrawn", c.withdrawn, "Claims removed after their Binding failed."),
            ("pruned", c.pruned, "Claims of pods bound, gone, finished or never bound, removed."),
            ("absorbed", c.absorbed, "Claims of other replicas recorded in the state before the watch saw them."),
            ("waits", c.waited, "Ledger writes that first waited for this replica's watch of pods to reach the "
                                "ledger's watermark."),
        ):
            yield CounterMetricFamily(f"devshare_extender_claim_{name}", doc, value=value)
