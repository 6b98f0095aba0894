"""The read surface's one snapshot: ``/ui/occupancy`` and ``/inspect`` are answered from it, never
built per request, so that open pages and scripts never starve the scheduling verbs.

- **At most once per interval.** A copy of the state (:meth:`ClusterState.view`, the usage the agents
  reported, the queue, the quotas, the history) is *taken* on the event loop when a request finds the
  last one stale: older than the interval, counted from the end of the last build. The interval is
  ``interval`` seconds (1), or ``REST`` (4) times what that build took, whichever is longer: the
  builder rests at least four times as long as it works, so it never takes more than a fifth of a
  core, whatever the cluster's size and the machine's load. Every caller of that interval is
  answered from it; ``/inspect`` moreover holds every change made before its request (a script that
  binds then inspects sees its bind): when the state changed since the copy, a new one is taken as
  soon as the builder has rested (``REST`` times its last build), shared by every caller waiting so.
- **Shared.** Each answer (the occupancy page's JSON, the inspect JSON) is built from the taken copy
  once, in one worker thread, off the event loop; requests that come while it is built wait for that
  same build, not one of their own. Only one build runs at a time.
- **Compressed.** Each unfiltered answer is gzipped once, in the worker, and sent so to a client that
  accepts it (browsers, Go and Python HTTP clients do; ``curl`` with ``--compressed``).
- **Bounded.** At most ``max_waiting`` requests wait for a build; more are answered 503 with
  ``Retry-After`` (:class:`Busy`). The occupancy JSON lists at most ``max_nodes`` nodes (those matching
  the page's filter, ``?q=``, first by name), and says so (``"shown"``, ``"matched"``); its totals cover
  every node. The inspect JSON lists at most ``max_inspect_nodes`` (and then adds ``"truncated"``).

The verbs never wait here: they take no lock of this module, and the thread holds only the copy.
"""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec

from devshare.engine.stateview import StateView, inspect_view
from devshare.model.usage import NodeUsage
from devshare.server.extender.extender import Extender
from devshare.server.extender.history import History
from devshare.server.extender.occupancy import occupancy
from devshare.server.extender.page import take_queue, take_quotas

INTERVAL = 1.0  # seconds a snapshot answers for at least, after its build ended
REST = 4.0  # ... and at least this many times what it took to make
MAX_WAITING = 64  # requests waiting for a build at once; more get a 503
MAX_NODES = 500  # nodes in one occupancy answer (the page's filter picks which)
MAX_INSPECT_NODES = 20_000  # nodes in one inspect answer
GZIP_LEVEL = 1  # fast: 7.5 MiB of inspect JSON (5,000 nodes) in tens of milliseconds, off the GIL

T = TypeVar("T")
encode = msgspec.json.Encoder().encode


class Busy(Exception):
    """Too many requests wait for the read surface's build: answer 503, retry in a second."""


@dataclass
class Taken:
    """What was copied on the event loop for one interval's answers."""

    generation: int
    at: float  # when it was taken (the surface's clock)
    version: int  # the state's version then (ClusterState.version: bumped by every change)
    view: StateView
    usage: dict[str, NodeUsage]
    extras: dict[str, Any]  # queue, quotas, config, history: small, already plain JSON types
    _inspected: dict[str, Any] | None = None

    def inspected(self) -> dict[str, Any]:
        """:func:`inspect_view` of the copy, made once (in the worker thread) for both answers."""
        if self._inspected is None:
            self._inspected = inspect_view(self.view, pause)
        return self._inspected


def pause() -> None:
    """Let the event loop's thread have the interpreter, if it waits for it: the builder gives up the
    GIL every few hundred devices, so that a verb waits for it a fraction of a millisecond rather than
    Python's switch interval (5 ms) at each turn."""
    time.sleep(0)


@dataclass
class Body:
    """An answer's JSON, and gzipped (made once per snapshot, in the worker: ``zlib`` lets go of the
    GIL) for the clients that accept it: JSON of thousands of cards shrinks about tenfold, and so does
    the cost of sending it to every page and script again and again."""

    raw: bytes
    gz: bytes | None = None

    @classmethod
    def compressed(cls, raw: bytes) -> Body:
        return cls(raw, gzip.compress(raw, compresslevel=GZIP_LEVEL, mtime=0))


@dataclass
class OccupancyDoc:
    """The occupancy JSON of one snapshot, node by node, so a filtered answer is a join of bytes; the
    unfiltered answer made once."""

    head: dict[str, Any]  # everything but the nodes
    nodes: list[tuple[str, bytes]]  # (what the filter searches: node and holders' names, lower case; JSON)
    limit: int
    whole: Body | None = None

    def answer(self, q: str) -> Body:
        q = q.strip().lower()
        if not q and self.whole is not None:
            return self.whole
        matched = [raw for text, raw in self.nodes if q in text] if q else [raw for _, raw in self.nodes]
        shown = matched[:self.limit]
        head = {**self.head, "matched": len(matched), "shown": len(shown), "maxNodes": self.limit, "query": q}
        return Body(b'{"nodes":[' + b",".join(shown) + b"]," + encode(head)[1:])


@dataclass
class _Built(Generic[T]):
    generation: int
    future: asyncio.Future[T]


@dataclass
class ReadSurface:
    extender: Extender
    history: History
    config: dict[str, Any]
    interval: float = INTERVAL
    clock: Callable[[], float] = time.monotonic
    max_waiting: int = MAX_WAITING
    max_nodes: int = MAX_NODES
    max_inspect_nodes: int = MAX_INSPECT_NODES
    builds: int = 0  # answers built (each shared by every request of its interval)
    takes: int = 0  # copies taken
    busy: int = 0  # requests answered 503
    last_seconds: float = 0.0  # what the last build took
    _taken: Taken | None = None
    _fresh_until: float = float("-inf")
    _rest_until: float = float("-inf")
    _built: dict[str, _Built[Any]] = field(default_factory=dict)
    _waiting: int = 0
    _pool: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(1, "devshare-read-surface"))

    # ------------------------------------------------------------------ on the event loop
    def _take(self) -> Taken:
        ext = self.extender
        state = ext.state
        cluster = ext.cluster
        quotas = ext.lifecycle.scheduler.quotas
        self.takes += 1
        started = time.perf_counter()
        taken = Taken(
            generation=self.takes, at=self.clock(), version=state.version, view=state.view(), usage=dict(cluster.usage),
            extras={"queue": take_queue(cluster.pending, ext.refused),
                    "quotas": take_quotas(quotas, {ns: list(v) for ns, v in state.namespace_gpu.items()}),
                    "config": self.config, "history": self.history.json()})
        # what the copy held the event loop for, and what the last build took (wall-clock seconds)
        taken.extras["snapshot"] = {"intervalSeconds": max(self.interval, REST * self.last_seconds),
                                    "lastBuildSeconds": round(self.last_seconds, 3),
                                    "copySeconds": round(time.perf_counter() - started, 4), "takenAt": time.time()}
        return taken

    def _current(self) -> Taken:
        now = self.clock()
        if self._taken is None or now >= self._fresh_until:
            self._renew()
        assert self._taken is not None
        return self._taken

    def _renew(self) -> None:
        self._taken = self._take()
        self._fresh_until = self._rest_until = float("inf")  # until its first build ends

    async def _catch_up(self) -> None:
        """Until the copy holds every change of the state made before now: a new copy as soon as the
        builder has rested (after the build in flight, if any), shared with every caller waiting so."""
        version = self.extender.state.version
        while self._taken is not None and self._taken.version < version:
            now = self.clock()
            if now >= self._rest_until:
                self._renew()
                return
            in_flight = [b.future for b in self._built.values() if not b.future.done()]
            if in_flight:
                await asyncio.wait(in_flight)
            else:
                await asyncio.sleep(self._rest_until - now)

    async def _get(self, name: str, build: Callable[[Taken], T], *, current: bool = False) -> T:
        if current and self._taken is not None and self._taken.version != self.extender.state.version:
            if self._waiting >= self.max_waiting:
                self.busy += 1
                raise Busy(f"{self._waiting} requests wait for the read surface already: retry in a second")
            self._waiting += 1
            try:
                await self._catch_up()
            finally:
                self._waiting -= 1
        taken = self._current()
        built = self._built.get(name)
        if built is not None and built.generation == taken.generation and built.future.done():
            done: T = built.future.result()
            return done
        if self._waiting >= self.max_waiting:
            self.busy += 1
            raise Busy(f"{self._waiting} requests wait for the read surface already: retry in a second")
        if built is None or built.generation != taken.generation:
            started = self.clock()
            future = asyncio.get_running_loop().run_in_executor(self._pool, build, taken)
            built = self._built[name] = _Built(taken.generation, future)
            future.add_done_callback(lambda _: self._done(taken, started))
            self.builds += 1
        self._waiting += 1
        try:
            result: T = await asyncio.shield(built.future)
            return result
        finally:
            self._waiting -= 1

    def _done(self, taken: Taken, started: float) -> None:
        if self._taken is taken:
            now = self.clock()
            self.last_seconds = now - started
            self._rest_until = now + REST * self.last_seconds
            self._fresh_until = now + max(self.interval, REST * self.last_seconds)

    # ------------------------------------------------------------------ the answers
    async def occupancy(self, q: str = "") -> Body:
        limit = self.max_nodes
        doc = await self._get("occupancy", lambda taken: _occupancy_doc(taken, limit))
        return doc.answer(q)

    async def inspect(self) -> Body:
        """DESIGN.md's inspect JSON, holding every change made before the request (a script that binds,
        then inspects, sees its bind): a new copy when the state changed since the last, as soon as
        the builder has rested."""
        limit = self.max_inspect_nodes
        return await self._get("inspect", lambda taken: _inspect_json(taken, limit), current=True)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _occupancy_doc(taken: Taken, limit: int) -> OccupancyDoc:
    """In the worker thread: the occupancy of the taken copy, node by node."""
    occ = occupancy(taken.view, taken.usage, inspected=taken.inspected(), pause=pause)
    nodes = []
    for i, n in enumerate(occ["nodes"]):
        if not i % 32:
            pause()
        who = {h["pod"].lower() for d in n["devices"] for h in d["holders"]}
        nodes.append((" ".join([n["name"].lower(), *sorted(who)]), encode(n)))
    head = {k: v for k, v in occ.items() if k != "nodes"}
    doc = OccupancyDoc({**head, **taken.extras}, nodes, limit)
    doc.whole = Body.compressed(doc.answer("").raw)
    return doc


def _inspect_json(taken: Taken, limit: int) -> Body:
    out = taken.inspected()
    if len(out["nodes"]) > limit:
        out = {**out, "nodes": out["nodes"][:limit], "truncated": {"nodes": len(out["nodes"]), "shown": limit}}
    return Body.compressed(encode(out))
