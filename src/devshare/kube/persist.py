"""The cluster file: saving the in-memory backend's objects to it (``devshare extender --save``), and
reading it (:func:`load_documents`, the one reader of cluster files).

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
- Fast: each object is one JSON document (``---`` then the object on one line); encoding 2,000 pods
  takes milliseconds where the YAML emitter took about a second.
- Read back equal: a document that is JSON is read as JSON, every other one as YAML (so a file
  written by hand reads as before). JSON is not quite YAML 1.1: msgspec writes ``1e16`` and
  ``1e-20`` (no dot), which PyYAML reads as strings.

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
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import yaml

from devshare.model.errors import InvalidInput, yaml_error

log = logging.getLogger(__name__)

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
# libyaml's loader when PyYAML was built with it (about 10x faster on large cluster files)
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# a document start marker: "---" at the start of a line, then a space, a tab or the end of the line. In
# YAML that is a marker wherever it stands (inside a scalar or a flow collection it is an error)
_DOCUMENT_START = re.compile(r"^---(?=[ \t\r\n]|\Z)", re.MULTILINE)
# the start of a document that may be JSON: a "{" or "[" after blanks
_JSON_START = re.compile(r"[ \t\r\n]*[{\[]")


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


def decode_documents(text: str, source: object) -> Iterator[Any]:
    """Every document of a cluster file's ``text``, empty ones as None, in order: one that is JSON (a
    ``{...}`` or ``[...]`` and nothing else) decoded as JSON, the others as YAML. Invalid YAML raises
    InvalidInput naming ``source``, the document, its line and column."""
    text = text.removeprefix("\ufeff")
    starts = [m.start() for m in _DOCUMENT_START.finditer(text)]
    index = 0  # documents yielded
    yaml_from = 0  # where the YAML not read yet begins
    lines = 0  # line breaks before yaml_from
    # each piece: from the file's start, or from a marker ("---", 3 characters), to the next marker
    for (begin, marker), end in zip([(0, 0), *((s, 3) for s in starts)], [*starts, len(text)], strict=True):
        doc = _json_document(text, begin + marker, end)
        if doc is None or _ends_with_directive(text, yaml_from, begin):
            continue
        if yaml_from < begin:
            for yaml_doc in _yaml_documents("\n" * lines + text[yaml_from:begin], source, index):
                index += 1
                yield yaml_doc
        index += 1
        yield doc[0]
        lines += text.count("\n", yaml_from, end)
        yaml_from = end
    if yaml_from < len(text):
        yield from _yaml_documents("\n" * lines + text[yaml_from:], source, index)


def _json_document(text: str, begin: int, end: int) -> tuple[Any] | None:
    """``text[begin:end]`` decoded as JSON, as a 1-tuple; None when it is not JSON."""
    if begin >= end or not _JSON_START.match(text, begin, end):
        return None
    try:
        return (_decode(text[begin:end]),)
    except msgspec.DecodeError:
        return None


def _ends_with_directive(text: str, begin: int, end: int) -> bool:
    """Whether the last line of ``text[begin:end]`` that is neither blank nor a comment is a directive
    (%YAML, %TAG): it belongs to the next document, which YAML must then read."""
    for line in reversed(text[begin:end].splitlines()):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return line.startswith("%")
    return False


def _yaml_documents(text: str, source: object, before: int) -> Iterator[Any]:
    """The YAML documents of ``text`` (the ``before`` documents of the file that come first are not in
    it; ``text`` is padded with blank lines so that YAML's line numbers are the file's)."""
    index = before
    try:
        for doc in yaml.load_all(text, Loader=_LOADER):
            index += 1
            yield doc
    except yaml.YAMLError as e:
        raise yaml_error(e, f"{source}, document {index + 1}") from None


def read_documents(path: Path) -> Iterator[Any]:
    """The documents of the cluster file ``path``, empty ones as None (see :func:`decode_documents`).
    A file that is not UTF-8 (what the saver writes, and YAML's and JSON's encoding) raises InvalidInput."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInput(f"not a text file (byte {e.object[e.start]:#04x} at position {e.start} is not UTF-8): "
                           "give a YAML or JSON file", field=str(path)) from None
    return decode_documents(text, path)


def load_documents(path: Path) -> list[Any]:
    """The non-empty documents of the cluster file ``path`` (see :func:`read_documents`)."""
    return [d for d in read_documents(path) if d is not None]


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
