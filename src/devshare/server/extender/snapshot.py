"""The read surface's one snapshot: ``/ui/occupancy`` and ``/inspect`` are answered from it, never
built per request, so that open pages and scripts never starve the scheduling verbs.

- **At most once per interval.** A copy of the state (:meth:`ClusterState.view`, the usage the agents
  reported, the queue, the quotas, the history) is *taken* on the event loop when a request finds the
  last one older than ``interval`` seconds, counted from the end of the last build (so the builder is
  idle at least ``interval`` between two builds, whatever a build costs). Every caller of that
  interval is answered from it.
- **Shared.** Each answer (the occupancy page's JSON, the inspect JSON) is built from the taken copy
  once, in one worker thread, off the event loop; requests that come while it is built wait for that
  same build, not one of their own. Only one build runs at a time.
- **Bounded.** At most ``max_waiting`` requests wait for a build; more are answered 503 with
  ``Retry-After`` (:class:`Busy`). The occupancy JSON lists at most ``max_nodes`` nodes (those matching
  the page's filter, ``?q=``, first by name), and says so (``"shown"``, ``"matched"``); its totals cover
  every node. The inspect JSON lists at most ``max_inspect_nodes`` (and then adds ``"truncated"``).

The verbs never wait here: they take no lock of this module, and the thread holds only the copy.
"""

from __future__ import annotations

import asyncio
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

INTERVAL = 2.0  # seconds a snapshot answers for, after its build ended
MAX_WAITING = 64  # requests waiting for a build at once; more get a 503
MAX_NODES = 500  # nodes in one occupancy answer (the page's filter picks which)
MAX_INSPECT_NODES = 20_000  # nodes in one inspect answer

T = TypeVar("T")
encode = msgspec.json.Encoder().encode


class Busy(Exception):
    """Too many requests wait for the read surface's build: answer 503, retry in a second."""


@dataclass
class Taken:
    """What was copied on the event loop for one interval's answers."""

    generation: int
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
class OccupancyDoc:
    """The occupancy JSON of one snapshot, node by node, so a filtered answer is a join of bytes."""

    head: dict[str, Any]  # everything but the nodes
    nodes: list[tuple[str, bytes]]  # (what the filter searches: node and holders' names, lower case; JSON)

    def answer(self, q: str, limit: int) -> bytes:
        q = q.strip().lower()
        matched = [raw for text, raw in self.nodes if q in text] if q else [raw for _, raw in self.nodes]
        shown = matched[:limit]
        head = {**self.head, "matched": len(matched), "shown": len(shown), "maxNodes": limit, "query": q}
        return b'{"nodes":[' + b",".join(shown) + b"]," + encode(head)[1:]


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
    _taken: Taken | None = None
    _fresh_until: float = float("-inf")
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
        return Taken(
            generation=self.takes, view=state.view(), usage=dict(cluster.usage),
            extras={"queue": take_queue(cluster.pending, ext.refusals),
                    "quotas": take_quotas(quotas, {ns: list(v) for ns, v in state.namespace_gpu.items()}),
                    "config": self.config, "history": self.history.json(), "snapshot": {
                        "intervalSeconds": self.interval, "takenAt": time.time()}})

    def _current(self) -> Taken:
        now = self.clock()
        if self._taken is None or now >= self._fresh_until:
            self._taken = self._take()
            self._fresh_until = float("inf")  # until its first build ends
        return self._taken

    async def _get(self, name: str, build: Callable[[Taken], T]) -> T:
        taken = self._current()
        built = self._built.get(name)
        if built is not None and built.generation == taken.generation and built.future.done():
            done: T = built.future.result()
            return done
        if self._waiting >= self.max_waiting:
            self.busy += 1
            raise Busy(f"{self._waiting} requests wait for the read surface already: retry in a second")
        if built is None or built.generation != taken.generation:
            future = asyncio.get_running_loop().run_in_executor(self._pool, build, taken)
            built = self._built[name] = _Built(taken.generation, future)
            future.add_done_callback(lambda _: self._done(taken))
            self.builds += 1
        self._waiting += 1
        try:
            result: T = await asyncio.shield(built.future)
            return result
        finally:
            self._waiting -= 1

    def _done(self, taken: Taken) -> None:
        if self._taken is taken:
            self._fresh_until = self.clock() + self.interval

    # ------------------------------------------------------------------ the answers
    async def occupancy(self, q: str = "") -> bytes:
        doc = await self._get("occupancy", _occupancy_doc)
        return doc.answer(q, self.max_nodes)

    async def inspect(self) -> bytes:
        limit = self.max_inspect_nodes
        return await self._get("inspect", lambda taken: _inspect_json(taken, limit))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


def _occupancy_doc(taken: Taken) -> OccupancyDoc:
    """In the worker thread: the occupancy of the taken copy, node by node."""
    occ = occupancy(taken.view, taken.usage, inspected=taken.inspected(), pause=pause)
    nodes = []
    for i, n in enumerate(occ["nodes"]):
        if not i % 32:
            pause()
        who = {h["pod"].lower() for d in n["devices"] for h in d["holders"]}
        nodes.append((" ".join([n["name"].lower(), *sorted(who)]), encode(n)))
    head = {k: v for k, v in occ.items() if k != "nodes"}
    return OccupancyDoc({**head, **taken.extras}, nodes)


def _inspect_json(taken: Taken, limit: int) -> bytes:
    out = taken.inspected()
    if len(out["nodes"]) > limit:
        out = {**out, "nodes": out["nodes"][:limit], "truncated": {"nodes": len(out["nodes"]), "shown": limit}}
    return encode(out)
