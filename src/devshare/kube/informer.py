"""Informer: list, then watch, a backend's Nodes, Devices and Pods, and hand every object to handlers.

Start-up lists each kind (retrying with backoff until it works), hands the lists to the handlers,
and only then marks the informer synced. Then each kind is watched from its list's
resourceVersion: a 410 Gone re-lists that kind, a dropped connection reconnects with exponential
backoff from the last version seen, a watch the API server ended is resumed. An optional kind
(:data:`~devshare.kube.backend.OPTIONAL_KINDS`: Koordinator's Device) that the API server does not serve
(404: no such CRD) or lets devshare not read (403) is not followed; it is listed again every
:data:`ABSENT_RETRY` seconds.

What the objects mean is the handlers' business (the engine's :class:`~devshare.engine.watched.
WatchedCluster` for the extender, the webhook's Device types): this module imports nothing from the
engine. Every handler call happens on the event loop's thread, between awaits, so handlers never
run concurrently with each other or with the servers' request handlers on the same loop. A handler
that raises on one object is logged (and counted in :attr:`Informer.apply_errors`); the watch goes on.

After a re-list, the pods a handler holds that the list lacks are read one by one: such a pod may
have been created (and bound by the extender) after the list was taken. Those really gone are handed
to the handlers as deleted; the others as changed.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from devshare.kube.backend import KINDS, OPTIONAL_KINDS, Backend, Kind, WatchEvent, resource_version
from devshare.kube.errors import BackendError, Gone, Unavailable
from devshare.model.kubeobjects import meta

log = logging.getLogger(__name__)

ABSENT_RETRY = 300.0  # seconds between lists of an optional kind not served


class Backoff:
    """Exponential backoff with jitter: ``initial * 2**n`` capped at ``maximum``."""

    def __init__(self, initial: float = 0.2, maximum: float = 30.0, jitter: float = 0.1) -> None:
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self.attempts = 0

    def next_delay(self) -> float:
        delay = min(self.maximum, self.initial * 2 ** self.attempts)
        self.attempts += 1
        return float(delay * (1 + self.jitter * random.random()))

    def reset(self) -> None:
        self.attempts = 0


class Handler(Protocol):
    """What an informer feeds."""

    def listed(self, kind: Kind, items: list[dict[str, Any]], *, initial: bool) -> list[str]:
        """A full list of ``kind`` (``initial``: the first). Returns the keys of pods it holds that the
        list lacks: the informer reads each and hands it back (:meth:`changed`), as deleted when gone."""
        ...

    def changed(self, kind: Kind, type_: str, obj: dict[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) of ``kind``."""
        ...

    def progressed(self, kind: Kind, version: str, *, synced: bool) -> None:
        """The informer has seen ``kind`` up to ``version``; ``synced``: every kind was listed once."""
        ...


class Informer:
    """Follow ``kinds`` of ``backend`` into ``handlers`` (in order, each event to each).
    ``after_pods_listed``: awaited after each (re-)list of pods, before the first marks the informer
    synced (the extender reads its claim ledger there)."""

    def __init__(self, backend: Backend, handlers: Sequence[Handler], *, kinds: tuple[Kind, ...] = KINDS,
                 backoff: Callable[[], Backoff] = Backoff,
                 after_pods_listed: Callable[[], Awaitable[None]] | None = None,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.backend = backend
        self.handlers = tuple(handlers)
        self.kinds = kinds
        self._backoff = backoff
        self.after_pods_listed = after_pods_listed
        self.synced = asyncio.Event()
        self.resource_versions: dict[Kind, str] = {}
        self.relists = 0  # re-lists after 410 Gone
        self.reconnects = 0  # watch reconnections after a connection error
        self.events = 0  # watch events applied
        self.apply_errors = 0  # objects a handler failed on (a bug: logged with its trace)
        self.absent_kinds: set[Kind] = set()  # optional kinds not served, or not ours to read
        self._sleep = sleep  # between retries (tests pass their own)
        self._task: asyncio.Task[None] | None = None

    @property
    def is_synced(self) -> bool:
        return self.synced.is_set()

    # ------------------------------------------------------------------ running
    async def run(self) -> None:
        """List everything (retrying until it works), mark synced, then watch forever."""
        for kind in self.kinds:
            await self._list_with_retry(kind, initial=True)
        self.synced.set()
        for kind in self.kinds:
            self._progress(kind)
        log.debug("informer synced: %s", ", ".join(self.kinds))
        async with asyncio.TaskGroup() as tg:
            for kind in self.kinds:
                tg.create_task(self._watch_forever(kind), name=f"devshare-watch-{kind}")

    def start(self) -> asyncio.Task[None]:
        """Run in the background; returns the task (:meth:`stop` ends it)."""
        self._task = asyncio.create_task(self.run(), name="devshare-informer")
        return self._task

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    # ------------------------------------------------------------------ lists
    async def _list_with_retry(self, kind: Kind, *, initial: bool) -> None:
        backoff = self._backoff()
        while True:
            try:
                result = await self.backend.list(kind)
            except BackendError as e:
                if kind in OPTIONAL_KINDS and e.code in (403, 404):  # no such CRD, or not ours to read
                    if kind not in self.absent_kinds:
                        log.info("not following %s (%s); looking again every %g s", kind, e, ABSENT_RETRY)
                    self.absent_kinds.add(kind)
                    self.resource_versions[kind] = ""
                    return
                delay = backoff.next_delay()
                log.warning("listing %s failed (%s); retrying in %.1fs", kind, e, delay)
                await self._sleep(delay)
                continue
            self.absent_kinds.discard(kind)
            vanished: set[str] = set()
            for h in self.handlers:
                vanished.update(self._each(h.listed, kind, result.items, initial=initial) or [])
            self.resource_versions[kind] = result.resource_version
            self._progress(kind)
            await self._check_vanished(sorted(vanished))
            if kind == "pods" and self.after_pods_listed is not None:
                await self.after_pods_listed()
            return

    async def _check_vanished(self, keys: list[str]) -> None:
        """Pods a handler holds that a re-list did not show: gone, or created (and bound) after the list
        was taken? Read each; hand back those really gone as deleted."""
        for key in keys:
            ns, _, name = key.partition("/")
            try:
                obj = await self.backend.get_pod(ns, name)
            except BackendError as e:
                log.warning("pod %s: cannot tell whether it still exists (%s); keeping it", key, e)
                continue
            if obj is None:
                self._deliver("pods", "DELETED", {"metadata": {"namespace": ns, "name": name}})
            else:
                self._deliver("pods", "MODIFIED", obj)

    # ------------------------------------------------------------------ watches
    async def _watch_forever(self, kind: Kind) -> None:
        backoff = self._backoff()
        while True:
            if kind in self.absent_kinds:
                await self._sleep(ABSENT_RETRY)
                await self._list_with_retry(kind, initial=False)
                continue
            try:
                async for ev in self.backend.watch(kind, self.resource_versions[kind]):
                    backoff.reset()
                    self.apply_event(kind, ev)
            except Gone:
                self.relists += 1
                started = time.monotonic()
                log.warning("watch of %s: history compacted (410 Gone); re-listing", kind)
                await self._list_with_retry(kind, initial=False)
                log.warning("watch of %s: re-listed in %.1f s", kind, time.monotonic() - started)
            except BackendError as e:
                self.reconnects += 1
                delay = backoff.next_delay()
                level = logging.INFO if isinstance(e, Unavailable) else logging.WARNING
                log.log(level, "watch of %s broke (%s); reconnecting in %.1fs", kind, e, delay)
                await self._sleep(delay)
            except Exception:
                # never let one surprise stop following the cluster
                self.reconnects += 1
                delay = backoff.next_delay()
                log.exception("watch of %s failed unexpectedly; reconnecting in %.1fs", kind, delay)
                await self._sleep(delay)

    def apply_event(self, kind: Kind, ev: WatchEvent) -> None:
        rv = resource_version(ev.object)
        if ev.type != "BOOKMARK":
            self.events += 1
            self._deliver(kind, ev.type, ev.object)
        if rv is not None:
            self.resource_versions[kind] = rv
            self._progress(kind)

    def _deliver(self, kind: Kind, type_: str, obj: dict[str, Any]) -> None:
        for h in self.handlers:
            self._each(h.changed, kind, type_, obj)

    def _progress(self, kind: Kind) -> None:
        version = self.resource_versions.get(kind, "")
        for h in self.handlers:
            self._each(h.progressed, kind, version, synced=self.is_synced)

    def _each(self, call: Callable[..., Any], kind: Kind, *args: Any, **kw: Any) -> Any:
        """One handler's call: its failure is logged and counted, never fatal."""
        try:
            return call(kind, *args, **kw)
        except Exception:
            self.apply_errors += 1
            obj = args[1] if len(args) > 1 and isinstance(args[1], dict) else {}
            log.exception("%s of %s %s could not be applied", getattr(call, "__name__", "handler"), kind,
                          meta(obj).get("name", ""))
            return None
