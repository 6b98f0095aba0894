"""Assembling and running the extender: engine + informer + (leader election) + upkeep + HTTP app.

:func:`build_app` wires everything to a backend and returns the aiohttp application; its startup
hook starts the informer, the leader election (when asked) and the upkeep tasks in one task group,
its cleanup hook stops them (and saves a ``--cluster`` file when asked). :func:`serve` runs it until
SIGINT/SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from ssl import SSLContext

from aiohttp import web

from devshare.config import Configuration
from devshare.engine.build import build_engine
from devshare.engine.state import ClusterState
from devshare.engine.watched import WatchedCluster
from devshare.kube.backend import Backend
from devshare.kube.dra import DraApi
from devshare.kube.informer import Informer
from devshare.kube.leader import LeaderElector, LeaseFollower
from devshare.kube.ledger import ClaimLedger
from devshare.kube.memory import MemoryBackend
from devshare.kube.persist import SnapshotWriter
from devshare.server.dra.controller import DraController
from devshare.server.dra.metrics import DraCollector
from devshare.server.eventloop import StallWatch, new_event_loop
from devshare.server.extender.app import VERBS, make_app
from devshare.server.extender.claims import Claims, replica_identity
from devshare.server.extender.collectors import (
    ClaimsCollector,
    LaneCollector,
    RequeueCollector,
    SaveCollector,
    StallCollector,
    SyncCollector,
)
from devshare.server.extender.events import Events
from devshare.server.extender.extender import Extender
from devshare.server.extender.lane import Lanes
from devshare.server.extender.listening import listening_line, read_only_on
from devshare.server.extender.metrics import ExtenderMetrics
from devshare.server.extender.steering import Steerer
from devshare.server.extender.view import Leadership
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
    expire_interval: float = 5.0
    save: SnapshotWriter | None = None  # each bind durable in the file before it is answered (--save)
    freeze_after_sync: bool = False  # gc.freeze() once synced (the server process; not in tests)
    # the configuration (devshare.config, with the command line's flags applied): policy, weights, limits,
    # the assume TTL; None: the defaults
    config: Configuration | None = None
    # a second, read-only listener (GET /metrics, /healthz, /readyz, /inspect, /ui) for Prometheus and
    # people, on an address the extender API itself need not be exposed on; 0: none
    metrics_port: int = 0
    client_auth: bool = False  # verbs and /inspect need a verified client certificate (--tls-client-ca)
    # the spec.schedulerName of the kube-scheduler profile this extender serves: its pending pods are
    # kept from the watch for bind and nudged when devices free up (requeue.py)
    scheduler_name: str = DEFAULT_SCHEDULER
    # the event loop the server runs on (devshare.server.eventloop): auto (uvloop), uvloop or asyncio
    event_loop: str = "auto"
    # record each pod's claim in the claim ledger (one ConfigMap, written in batches) before its Binding, so
    # that two replicas binding at once never over-book a card (docs/deploy.md, "Several replicas")
    claim_ledger: bool = True
    # serve kube-scheduler's verbs off the socket on a plain-HTTP port (devshare.server.extender.lane);
    # False: every request through aiohttp
    lane: bool = True
    # DRA (issue 38): allocate the claims of devshare's DeviceClasses on this state (devshare.server.dra)
    dra_api: DraApi | None = None
    bind_summary_interval: float = 60.0  # seconds between two INFO lines summing up the binds (bindlog.py); 0: none


@dataclass
class Runtime:
    """What :func:`build_app` started; tests reach into it."""

    state: ClusterState
    informer: Informer
    cluster: WatchedCluster  # the informer's engine half: the extender's view of the cluster
    extender: Extender
    elector: LeaderElector | LeaseFollower | None
    claims: Claims | None = None
    dra: DraController | None = None  # DRA (issue 38)
    steerer: Steerer | None = None  # the steering taint on Nodes (issue 41)
    stalls: StallWatch = field(default_factory=lambda: StallWatch("extender"))
    task: asyncio.Task[None] | None = None  # the background tasks, in one task group


RUNTIME = web.AppKey("runtime", Runtime)


def build_app(backend: Backend, options: ExtenderOptions | None = None, *, leadership: Leadership | None = None,
              clock: Callable[[], float] = time.monotonic) -> web.Application:
    """The extender's application over ``backend``. ``leadership``: who says whether this replica may
    write, instead of the Lease the options ask for; ``clock``: the timed holds' and the leader
    election's, a monotonic one (both for tests)."""
    opts = options or ExtenderOptions()
    engine = build_engine(opts.config)
    state, lifecycle = engine.state, engine.lifecycle
    elector: LeaderElector | LeaseFollower | None = None
    if opts.follow_lease:
        elector = LeaseFollower(backend, pod_name=opts.pod_name, name=opts.follow_lease,
                                retry_period=opts.follow_period)
    elif opts.leader_election:
        timing = dict(zip(("lease_duration", "renew_deadline", "retry_period"), opts.lease_timing or (), strict=False))
        elector = LeaderElector(backend, identity=opts.identity, name=opts.lease_name, clock=clock, **timing)
    events = Events(backend)
    cluster = WatchedCluster(lifecycle, clock=clock, report=events.overbooked,
                             scheduler_name=opts.scheduler_name)
    identity = replica_identity(opts.pod_name or opts.identity)
    claims = (Claims(ClaimLedger(backend), lifecycle, cluster, identity=identity, ttl=lifecycle.ttl)
              if opts.claim_ledger else None)
    stop_at = os.environ.get(SIGSTOP_HOOK)
    metrics = ExtenderMetrics()
    extender = Extender(lifecycle, backend, cluster, leadership=leadership or elector, metrics=metrics,
                        refusals=engine.refusals, claims=claims, events=events, shortlist=engine.shortlist, clock=clock,
                        after_bind=opts.save.commit if opts.save is not None else None,
                        before_claim=StopBeforeClaim(stop_at) if stop_at else None, scheduler_name=opts.scheduler_name)
    cfg = opts.config
    if cfg is not None and cfg.scheduling.steer_other_pods and cfg.scheduling.shortlist == 0:
        log.warning("scheduling.steerOtherPods with shortlist 0: kube-scheduler also scores devshare's own pods"
                    " away from the nodes marked %s (set shortlist: 1, as deploy/ does)", "devshare.io/whole-gpu-free")
    steerer = Steerer(state, backend, extender.leadership, ready=lambda: informer.synced.wait(),
                      enabled=cfg is not None and cfg.scheduling.steer_other_pods)
    informer = Informer(backend, [cluster, extender, steerer],
                        after_pods_listed=claims.load if claims is not None else None)
    metrics.watch_state(state, cluster, extender.leadership, quotas=engine.scheduler.quotas)
    for collector in (SyncCollector(cluster), RequeueCollector(extender.requeue),
                      *([ClaimsCollector(claims)] if claims is not None else []),
                      *([SaveCollector(opts.save)] if opts.save is not None else [])):
        metrics.registry.register(collector)
    dra = None
    if opts.dra_api is not None:  # DRA (issue 38): the same lifecycle, so claims and pods share one accounting
        dra = DraController(opts.dra_api, lifecycle, is_leader=extender.leadership.may_write,
                            fence=extender.leadership.check, ready=informer.synced.wait,
                            assume_ttl=lifecycle.ttl, publish_slices=True)
        metrics.registry.register(DraCollector(dra))
    runtime = Runtime(state, informer, cluster, extender, elector, claims, dra, steerer)
    metrics.registry.register(StallCollector(runtime.stalls))
    app = make_app(extender, client_auth=opts.client_auth, config=opts.config)
    app[RUNTIME] = runtime
    if opts.metrics_port:
        app.middlewares.append(read_only_on(opts.metrics_port))

    async def background() -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(informer.run(), name="devshare-informer")
            if elector is not None:
                tg.create_task(elector.run(), name="devshare-leader-election")
            tg.create_task(upkeep(extender, cluster, opts.expire_interval, opts.bind_summary_interval),
                           name="devshare-upkeep")
            tg.create_task(extender.requeue.run(), name="devshare-requeue")
            tg.create_task(runtime.stalls.run(), name="devshare-stall-watch")
            tg.create_task(_tell_when_synced(informer, cluster, time.monotonic()), name="devshare-synced-log")
            tg.create_task(steerer.run(), name="devshare-steering")
            if opts.freeze_after_sync:
                tg.create_task(_freeze_when_synced(informer), name="devshare-gc-freeze")
            if runtime.dra is not None:  # DRA (issue 38)
                tg.create_task(runtime.dra.run(), name="devshare-dra")

    async def start(app: web.Application) -> None:
        runtime.task = asyncio.create_task(background(), name="devshare-extender-background")
        runtime.task.add_done_callback(_say_why_background_ended)

    async def stop(app: web.Application) -> None:
        if runtime.task is not None:
            runtime.task.cancel()
            await asyncio.gather(runtime.task, return_exceptions=True)
            runtime.task = None
        if elector is not None:
            await elector.release()
        if opts.save is not None:
            await opts.save.close()
        await backend.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app


async def upkeep(extender: Extender, cluster: WatchedCluster, interval: float, summary: float = 0.0) -> None:
    """Every ``interval`` seconds: the extender's timed holds expire (and the claim ledger is swept),
    the node agents' trade writes whose partner never came are applied alone, and the binds are summed
    up in the log when ``summary`` seconds have passed since the last time."""
    while True:
        await asyncio.sleep(interval)
        try:
            extender.binder.log.tick(summary)
            extender.expire()
            cluster.trades.expire()
            await extender.sweep_claims()
        except Exception:  # never let one surprise stop the upkeep
            log.exception("the extender's upkeep failed")


# A test hook (tests/e2e/test_replicas.py): the extender stops itself (SIGSTOP) when it is about to claim
# devices for this pod (``namespace/name``), after its leader fence, as a replica paused there would be.
SIGSTOP_HOOK = "DEVSHARE_TEST_SIGSTOP_BEFORE_CLAIM"


class StopBeforeClaim:
    """The hook of :data:`SIGSTOP_HOOK`: stop this process before claiming devices for the pod ``key``."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __call__(self, pod: str) -> None:
        if pod == self.key:
            log.warning("%s: stopping before the claim of pod %s", SIGSTOP_HOOK, pod)
            os.kill(os.getpid(), signal.SIGSTOP)


# the cyclic garbage collector's thresholds once synced (gc.set_threshold: allocations before a young
# collection, young collections before a middle one, middle ones before a full one); Python's own are
# (700, 10, 10)
GC_THRESHOLDS = (5000, 20, 100)


async def _freeze_when_synced(informer: Informer) -> None:
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
    await informer.synced.wait()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    log.debug("%d objects moved out of the garbage collector's reach", gc.get_freeze_count())


async def _tell_when_synced(informer: Informer, cluster: WatchedCluster, started: float) -> None:
    """Log, in an operator's words, when the extender has read the whole cluster and may schedule."""
    await informer.synced.wait()
    nodes, pods = len(cluster.state.nodes), len(cluster.pods_present)
    log.info("cluster synced: %d node%s, %d pod%s, in %.1f s; ready to schedule", nodes, "" if nodes == 1 else "s",
             pods, "" if pods == 1 else "s", time.monotonic() - started)


def serve(backend: Backend, options: ExtenderOptions | None = None, *, host: str = "127.0.0.1",
          port: int = 8888, metrics_host: str = "127.0.0.1", tls: CertReloader | None = None) -> None:
    """Serve until SIGINT/SIGTERM: over TLS with ``tls`` (kube-scheduler's extender config sets
    ``enableHTTPS`` and its ``tlsConfig``), plain HTTP otherwise (with the verbs' lane unless
    ``options.lane`` is off). The read-only port (``options.metrics_port``, on ``metrics_host``) uses
    TLS, with the same certificate, when the extender does."""
    opts = options or ExtenderOptions()
    opts.freeze_after_sync = True
    opts.client_auth = tls is not None and tls.client_ca is not None
    app = build_app(backend, opts)
    if tls is not None:
        app[RUNTIME].extender.metrics.registry.register(TLSCollector(tls))
    metrics_sock = None
    if opts.metrics_port:
        metrics_sock = socket.create_server((metrics_host, opts.metrics_port), reuse_port=False)

    def listening() -> None:  # logged once every socket is bound: never for a port it failed to take
        log.info("%s", listening_line(host, port, tls=tls is not None, client_auth=opts.client_auth,
                                      read_only=(metrics_host, opts.metrics_port) if opts.metrics_port else None))
        log.info("%s", election_line(opts))

    loop = new_event_loop(opts.event_loop)
    main = loop.create_task(_run(app, host, port, tls.context if tls is not None else None, metrics_sock,
                                 lane=opts.lane, listening=listening))
    failed = False
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(main)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    except BackgroundEnded:
        failed = True
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
    if failed:
        raise SystemExit(1)


async def _run(app: web.Application, host: str, port: int, ssl: SSLContext | None, metrics_sock: socket.socket | None,
               *, lane: bool, listening: Callable[[], None]) -> None:
    """Serve ``app`` (:func:`serving`) until cancelled, until SIGINT/SIGTERM (aiohttp's runner then
    raises ``GracefulExit``), or until the background tasks end (:class:`BackgroundEnded`)."""
    async with serving(app, host, port, ssl=ssl, metrics_sock=metrics_sock, lane=lane, handle_signals=True):
        listening()
        background = app[RUNTIME].task
        if background is not None:
            await asyncio.wait({background})
            raise BackgroundEnded  # logged by _say_why_background_ended
        while True:
            await asyncio.sleep(3600)


class BackgroundEnded(Exception):
    """The informers, the election and the other background tasks stopped while the extender served:
    it exits (status 1) so that it is restarted, rather than answer from a state nothing updates."""


def _say_why_background_ended(task: asyncio.Task[None]) -> None:
    """One log line, with the traceback, when the background tasks end other than by cancellation: an
    exception in any of them ends the task group (and so every watch and the election), which nothing
    else would say."""
    if task.cancelled():
        return
    exc = task.exception()
    log.critical("the extender's background tasks stopped (%s): its watches and leader election no longer "
                 "run, so it exits to be restarted", "an error in one of them" if exc else "they returned",
                 exc_info=exc)


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
    kube-scheduler's verbs; over TLS, and on the read-only port, every request goes through aiohttp.
    The read-only port is served over TLS with ``ssl`` too."""
    runner = web.AppRunner(app, handle_signals=handle_signals, access_log=None)
    await runner.setup()
    lanes: Lanes | None = None
    collector: LaneCollector | None = None
    server: asyncio.AbstractServer | None = None
    try:
        if lane and ssl is None:
            assert runner.server is not None
            lanes = Lanes(app[VERBS], app[RUNTIME].extender, runner.server)
            collector = LaneCollector(lanes)
            app[RUNTIME].extender.metrics.registry.register(collector)
            server = await asyncio.get_running_loop().create_server(lanes, host, port, reuse_address=True)
            bound = server.sockets[0].getsockname()[1]
        else:
            site = web.TCPSite(runner, host, port, ssl_context=ssl)
            await site.start()
            bound = runner.addresses[-1][1]
        if metrics_sock is not None:  # over TLS when the extender API is: the same certificate
            await web.SockSite(runner, metrics_sock, ssl_context=ssl).start()
        yield Serving(bound, lanes)
    finally:
        if server is not None:
            server.close()
        if lanes is not None:
            await lanes.shutdown()
        if collector is not None:
            app[RUNTIME].extender.metrics.registry.unregister(collector)
        await runner.cleanup()


def election_line(opts: ExtenderOptions) -> str:
    """The start-up line that says which replica binds."""
    if opts.follow_lease:
        return (f"leader election: follows the Lease {opts.follow_lease} of the kube-scheduler in this pod "
                f"({opts.pod_name}): binds while that kube-scheduler leads, answers filters always")
    if opts.leader_election:
        return (f"leader election: on (Lease {opts.lease_name}, identity {opts.identity}): binds while it holds "
                "the Lease")
    return "leader election: off: this extender binds every pod it is asked to (run a single replica)"


def cluster_saver(backend: MemoryBackend, path: Path) -> SnapshotWriter:
    """The ``save`` of ``--save``: the memory backend's objects written back to ``path``, atomically,
    off the event loop, each bind on disk before it is answered (:mod:`devshare.kube.persist`)."""
    return SnapshotWriter(backend.snapshot, path)
