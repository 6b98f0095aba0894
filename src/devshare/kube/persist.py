"""Saving the in-memory backend's objects to its cluster file (``devshare extender --save``).

- Atomic: the file is written to a temporary file beside it, flushed and fsynced, then renamed over
  it (and the directory fsynced). A write that fails part-way (disk full, a crash) leaves the
  previous file whole; the temporary file is removed.
- Off the event loop: encoding and writing run in a worker thread. The objects are read on the
  loop as a list of references; the store never changes an object in place (every write makes a
  new one), so the thread encodes a consistent snapshot.
- Durable before acknowledged: :meth:`SnapshotWriter.commit` (awaited by each bind before it is
  answered) returns once a write that began after the call has reached the disk (fsync of the file,
  then of the directory after the rename). Binds that arrive while a write is on its way wait
  together and share the next write (group commit), so a burst costs a few writes, not one per bind.
  A process killed at any moment (kill -9) leaves a file holding every bind it acknowledged.
- Fast: each object is one JSON document (``---`` then the object on one line). JSON is YAML, so
  the file loads as a cluster file as before; encoding 2,000 pods takes milliseconds where the
  YAML emitter took about a second.

A failed write is logged, counted (:attr:`SnapshotWriter.failures`, exported by the extender as
``devshare_extender_save_failures_total``) and tried again at the next commit; the binds that waited
for it are answered with the reason (the pod is bound in memory but not saved).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec

log = logging.getLogger(__name__)

_encode = msgspec.json.Encoder().encode


# characters JSON leaves as they are but YAML does not read back as they are, as their UTF-8 bytes:
# U+007F-U+009F and U+FFFE-U+FFFF (refused: "special characters are not allowed"), and U+2028 and
# U+2029 (line breaks in YAML 1.1 with U+0085: folded into a space, or a broken document)
_NOT_YAML = re.compile(rb"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]|\xef\xbf[\xbe\xbf]")


def _escaped(match: re.Match[bytes]) -> bytes:
    return b"\\u%04x" % ord(match.group().decode())


def encode_documents(objects: Iterable[dict[str, Any]]) -> bytes:
    """A multi-document YAML file of ``objects``, one JSON document each. The characters YAML refuses
    (they can only be inside strings) are written as JSON's ``\\uXXXX`` escapes, which YAML reads back."""
    data = b"".join(b"---\n" + _encode(o) + b"\n" for o in objects)
    return _NOT_YAML.sub(_escaped, data) if _NOT_YAML.search(data) else data


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
    """Write ``snapshot()`` (a list of objects, taken on the loop) to ``path``: :meth:`commit` returns once
    every change made before it is on disk; commits that come together share one write."""

    def __init__(self, snapshot: Callable[[], list[dict[str, Any]]], path: Path | str) -> None:
        self.snapshot = snapshot
        self.path = Path(path)
        self.writes = 0
        self.failures = 0
        self.last_error: str | None = None
        self._waiting: list[asyncio.Future[str | None]] = []  # commits the next write answers
        self._task: asyncio.Task[None] | None = None

    async def commit(self) -> str | None:
        """Return once a write begun after this call has reached the disk: None, or why it failed (the
        previous file is then whole and kept)."""
        done: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._waiting.append(done)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="devshare-save")
        return await asyncio.shield(done)  # a caller that goes away does not stop the write of the others

    async def _run(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            objects = self.snapshot()  # taken now: every change committed before is in it
            try:
                await asyncio.to_thread(self._write, objects)
                why = None
            except Exception:  # counted and logged in _write
                why = self.last_error or "the write failed"
            for done in batch:
                if not done.done():
                    done.set_result(why)

    def _write(self, objects: list[dict[str, Any]]) -> None:
        try:
            write_atomic(self.path, encode_documents(objects))
        except Exception as e:
            self.failures += 1
            # an OSError's own text names the temporary file (a new random name each write): its reason
            # alone, so a failure that lasts is logged once (the cluster file is named in the log line)
            reason = e.strerror if isinstance(e, OSError) and e.strerror else e
            message = f"{type(e).__name__}: {reason}"
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
        """Write the objects once more (at shutdown), off the loop, after any write on its way;
        failures are logged."""
        await self.idle()
        with contextlib.suppress(Exception):
            await asyncio.to_thread(self._write, self.snapshot())
