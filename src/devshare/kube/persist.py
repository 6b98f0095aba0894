"""Saving the in-memory backend's objects to its cluster file (``devshare extender --save``).

- Atomic: the file is written to a temporary file beside it, flushed and fsynced, then renamed over
  it (and the directory fsynced). A write that fails part-way (disk full, a crash) leaves the
  previous file whole; the temporary file is removed.
- Off the event loop: encoding and writing run in a worker thread. The objects are read on the
  loop as a list of references; the store never changes an object in place (every write makes a
  new one), so the thread encodes a consistent snapshot.
- Coalesced: :meth:`SnapshotWriter.request` (called after each bind) only marks the file stale;
  one write happens ``delay`` seconds later, covering every bind since. A bind therefore costs
  nothing here; a crash may lose the binds of the last ``delay`` seconds, which the cluster's
  owner re-binds (the file's pods are then pending again).
- Fast: each object is one JSON document (``---`` then the object on one line). JSON is YAML, so
  the file loads as a cluster file as before; encoding 2,000 pods takes milliseconds where the
  YAML emitter took about a second.

A failed write is logged, counted (:attr:`SnapshotWriter.failures`, exported by the extender as
``devshare_extender_save_failures_total``) and retried at the next request; it never fails a bind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec

log = logging.getLogger(__name__)

_encode = msgspec.json.Encoder().encode


def encode_documents(objects: Iterable[dict[str, Any]]) -> bytes:
    """A multi-document YAML file of ``objects``, one JSON document each."""
    return b"".join(b"---\n" + _encode(o) + b"\n" for o in objects)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: all of it or, on any failure, none of it."""
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with open(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself durable (not every filesystem allows this)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


class SnapshotWriter:
    """Write ``snapshot()`` (a list of objects, taken on the loop) to ``path``, coalescing requests."""

    def __init__(self, snapshot: Callable[[], list[dict[str, Any]]], path: Path | str, *,
                 delay: float = 0.5) -> None:
        self.snapshot = snapshot
        self.path = Path(path)
        self.delay = delay
        self.writes = 0
        self.failures = 0
        self.last_error: str | None = None
        self._dirty = False
        self._task: asyncio.Task[None] | None = None

    def request(self) -> None:
        """The objects changed: write them soon (never raises, never blocks)."""
        self._dirty = True
        if self._task is None or self._task.done():
            try:
                self._task = asyncio.get_running_loop().create_task(self._run(), name="devshare-save")
            except RuntimeError:  # no loop (a tool calling it directly): write now
                self._write(self.snapshot())

    def __call__(self) -> None:
        self.request()

    async def _run(self) -> None:
        while self._dirty:
            await asyncio.sleep(self.delay)
            self._dirty = False
            objects = self.snapshot()
            try:
                await asyncio.to_thread(self._write, objects)
            except Exception:  # counted and logged in _write; try again at the next request
                return

    def _write(self, objects: list[dict[str, Any]]) -> None:
        try:
            write_atomic(self.path, encode_documents(objects))
        except Exception as e:
            self.failures += 1
            message = f"{type(e).__name__}: {e}"
            if message != self.last_error:
                log.warning("could not save the cluster to %s (the previous file is kept): %s", self.path, message)
            self.last_error = message
            raise
        self.writes += 1
        if self.last_error is not None:
            log.info("saved the cluster to %s again", self.path)
        self.last_error = None

    async def idle(self) -> None:
        """Wait until no write is pending or running."""
        while self._task is not None and not self._task.done():
            await asyncio.wait({self._task})

    async def close(self) -> None:
        """Write what is pending now (at shutdown), off the loop; failures are logged."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self._write, self.snapshot())
        self._dirty = False
