"""A versioned object store with watch history: the heart of the in-memory backend (and of the
tests' fake API server).

Like etcd behind an API server: one global resourceVersion counter bumped by every write, each
object carrying the version of its last write in ``metadata.resourceVersion``, and a history of
events that watches replay from a version. History older than ``compacted`` is gone: a watch from
before it gets :class:`~devshare.kube.errors.Gone`.

Stored objects are never mutated in place (every write stores a new dict), so the objects handed
out and kept in history stay valid snapshots. Callers must not mutate them either.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
from typing import Any, NamedTuple

from devshare.kube.errors import Conflict, Gone, NotFound


class StoredEvent(NamedTuple):
    rv: int
    resource: str
    type: str  # ADDED | MODIFIED | DELETED
    key: str
    object: dict[str, Any]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch; returns a new value (``target`` is left untouched)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class ObjectStore:
    def __init__(self, *, history_limit: int | None = 100_000) -> None:
        self.rv = 0
        self.compacted = 0  # events with rv <= compacted are no longer in history
        self.history_limit = history_limit
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}
        self.history: builtins.list[StoredEvent] = []
        self._waiters: builtins.list[asyncio.Event] = []

    # ------------------------------------------------------------------ reads
    def get(self, resource: str, key: str) -> dict[str, Any] | None:
        return self.objects.get(resource, {}).get(key)

    def list(self, resource: str) -> tuple[builtins.list[dict[str, Any]], str]:
        return list(self.objects.get(resource, {}).values()), str(self.rv)

    def events_since(self, resource: str, rv: int) -> builtins.list[StoredEvent]:
        """Events of ``resource`` after version ``rv``. Gone if history no longer reaches back there."""
        if rv < self.compacted:
            raise Gone(f"too old resource version: {rv} ({self.compacted})", code=410)
        # history is sorted by rv: skip what the caller has seen
        lo, hi = 0, len(self.history)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.history[mid].rv <= rv:
                lo = mid + 1
            else:
                hi = mid
        return [e for e in self.history[lo:] if e.resource == resource]

    async def wait_change(self, after_rv: int, timeout: float | None = None) -> bool:
        """Wait until the store moves past ``after_rv`` (True) or ``timeout`` passes (False)."""
        if self.rv > after_rv:
            return True
        ev = asyncio.Event()
        self._waiters.append(ev)
        try:
            await asyncio.wait_for(ev.wait(), timeout)
        except TimeoutError:
            return False
        finally:
            if ev in self._waiters:
                self._waiters.remove(ev)
        return True

    def notify(self) -> None:
        """Wake every waiter (also used to make watches notice a compaction)."""
        waiters, self._waiters = self._waiters, []
        for ev in waiters:
            ev.set()

    # ------------------------------------------------------------------ writes
    def _record(self, resource: str, type_: str, key: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj = dict(obj)
        obj["metadata"] = {**(obj.get("metadata") or {}), "resourceVersion": str(self.rv)}
        if type_ == "DELETED":
            self.objects.get(resource, {}).pop(key, None)
        else:
            self.objects.setdefault(resource, {})[key] = obj
        self.history.append(StoredEvent(self.rv, resource, type_, key, obj))
        if self.history_limit is not None and len(self.history) > self.history_limit:
            self.compact(self.history[len(self.history) - self.history_limit - 1].rv)
        self.notify()
        return obj

    def create(self, resource: str, key: str, obj: dict[str, Any]) -> dict[str, Any]:
        if key in self.objects.get(resource, {}):
            raise Conflict(f"{resource} {key!r} already exists", code=409)
        return self._record(resource, "ADDED", key, copy.deepcopy(obj))

    def put(self, resource: str, key: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or replace, no questions asked."""
        exists = key in self.objects.get(resource, {})
        return self._record(resource, "MODIFIED" if exists else "ADDED", key, copy.deepcopy(obj))

    def update(self, resource: str, key: str, obj: dict[str, Any], *, expect_rv: str | None = None
               ) -> dict[str, Any]:
        """Replace an object; Conflict when ``expect_rv`` is given and is not its current version."""
        cur = self.get(resource, key)
        if cur is None:
            raise NotFound(f"{resource} {key!r} not found", code=404)
        if expect_rv is not None and expect_rv != cur["metadata"]["resourceVersion"]:
            raise Conflict(
                f"Operation cannot be fulfilled on {resource} {key!r}: the object has been modified; "
                "please apply your changes to the latest version and try again", code=409)
        return self._record(resource, "MODIFIED", key, copy.deepcopy(obj))

    def patch(self, resource: str, key: str, patch: dict[str, Any]) -> dict[str, Any]:
        cur = self.get(resource, key)
        if cur is None:
            raise NotFound(f"{resource} {key!r} not found", code=404)
        return self._record(resource, "MODIFIED", key, merge_patch(cur, patch))

    def delete(self, resource: str, key: str) -> dict[str, Any]:
        cur = self.get(resource, key)
        if cur is None:
            raise NotFound(f"{resource} {key!r} not found", code=404)
        return self._record(resource, "DELETED", key, cur)

    def compact(self, upto: int | None = None) -> None:
        """Forget history up to version ``upto`` (default: all of it)."""
        upto = self.rv if upto is None else min(upto, self.rv)
        if upto <= self.compacted:
            return
        self.compacted = upto
        self.history = [e for e in self.history if e.rv > upto]
        self.notify()
