"""kube-scheduler's verbs served off the socket, parsed by llhttp (httptools): the extender's lane.

kube-scheduler waits for every filter before it takes its next pod, and the extender shares its cores
with the control plane, so what serving a request costs counts twice: in CPU, and on kube-scheduler's
path. aiohttp's request machinery (its request and response objects, streams, the handler's task)
costs about 150 us of CPU per request more than answering off the socket, and kube-scheduler sends
two requests per pod; measured on the real control plane, the lane makes the extender's phases 8-12%
faster (BENCHMARKS.md).

On a plain-HTTP port each connection starts in a :class:`Lane`. Its bytes are parsed by llhttp (through
httptools: the parser aiohttp's own is built on; nothing here reads HTTP by hand). The lane answers a
request itself only when it is plainly what kube-scheduler's client sends: ``POST`` to one of
the verbs' paths, HTTP version 1.1, one ``Host``, one ``Content-Length`` within the body limit, no
``Transfer-Encoding``, ``Expect`` or ``Upgrade``, header values of printable ASCII, a head within
aiohttp's line limit, and the request alone in the bytes that brought its end. The verb answers as
through aiohttp (:class:`~devshare.server.extender.app.Verb`, the one owner of the answer and its
metrics), with the headers aiohttp writes. Anything else (another path or method, a parse error, a
chunked body, a request pipelined behind another in one read) is not judged here: the connection is
handed, with every byte not yet answered, to aiohttp's handler for the application, which answers it
and the rest of that connection as it always does. So the lane decides nothing aiohttp would answer
differently (``tests/server/extender/test_lane.py`` sends the same bytes, hostile ones included, to both
and compares the answers); it only skips aiohttp's cost for the requests that are most of the traffic.

Answers go out in order; a verb still running when the client goes away runs to its end (a bind is
never cut in the middle), as aiohttp's handlers do by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from http import HTTPStatus
from typing import cast

import httptools
from aiohttp import hdrs
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http import SERVER_SOFTWARE, HttpVersion11, StreamWriter
from multidict import CIMultiDict

from devshare.server.extender.app import MAX_BODY, Verb
from devshare.server.extender.extender import Extender

log = logging.getLogger(__name__)

# bytes of request line and headers the lane serves at most (aiohttp refuses a line longer than 8190):
# a longer head is handed over, so that aiohttp judges it
HEAD_LIMIT = 8190
MAX_HEADERS = 64  # headers of a request the lane serves (kube-scheduler's client sends five)
IDLE_TIMEOUT = 75.0  # seconds a connection may stay idle between requests (aiohttp's keep-alive default)
REFUSED = frozenset({b"transfer-encoding", b"expect", b"upgrade", b"te"})  # headers aiohttp handles, never the lane
CONNECTION_TOKENS = frozenset({b"close", b"keep-alive"})
PRINTABLE = frozenset(range(0x20, 0x7F)) | {0x09}  # what a header value the lane serves may hold


@functools.lru_cache(maxsize=64)
def _status_line(status: int) -> str:
    """The status line of an answer, as aiohttp's own responses compose it for a request of version 1.1
    (``StreamResponse._write_headers``); aiohttp's writer serializes it with the headers."""
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    v = HttpVersion11
    return f"HTTP/{v.major}.{v.minor} {status} {reason}"


class _Date:
    """The ``Date`` header's value, formatted once a second."""

    def __init__(self) -> None:
        self.second = -1
        self.value = ""

    def __call__(self) -> str:
        now = int(time.time())
        if now != self.second:
            self.second, self.value = now, email.utils.formatdate(now, usegmt=True)
        return self.value


class Lanes:
    """The lanes of one listening port: the protocol factory for ``loop.create_server``.

    ``verbs``: path -> :class:`Verb`; ``ext``: what the verbs answer with (the application's
    extender); ``fallback``: aiohttp's protocol factory for the same application (its
    ``web.Server``), which takes over a connection the lane does not serve."""

    def __init__(self, verbs: dict[str, Verb], ext: Extender, fallback: Callable[[], asyncio.Protocol], *,
                 max_body: int = MAX_BODY, idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.verbs = {path.encode(): verb for path, verb in verbs.items()}
        self.ext = ext
        self.fallback = fallback
        self.max_body = max_body
        self.idle_timeout = idle_timeout
        self.date = _Date()
        self.open: set[Lane] = set()
        self.served = 0  # requests the lanes answered themselves
        self.handed = 0  # connections handed to aiohttp
        self.connections = 0  # connections accepted (kube-scheduler's client keeps two idle: binds in flight open more)

    def __call__(self) -> Lane:
        self.connections += 1
        return Lane(self)

    async def shutdown(self, timeout: float = 60.0) -> None:
        """Let the verbs running finish (at most ``timeout`` seconds), then close every connection."""
        running = [lane.task for lane in self.open if lane.task is not None and not lane.task.done()]
        if running:
            await asyncio.wait(running, timeout=timeout)
        for lane in list(self.open):
            lane.close()


class _Message:
    """One request as llhttp reads it."""

    __slots__ = ("body", "complete", "head_done", "headers", "keep_alive", "url", "verb")

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body = bytearray()
        self.verb: Verb | None = None  # once its head is read and judged the lane's
        self.head_done = False
        self.complete = False
        self.keep_alive = True


class _Ends:
    """llhttp's callbacks counting the requests completed (to find where one ends in a buffer)."""

    def __init__(self) -> None:
        self.complete = 0

    def on_message_complete(self) -> None:
        self.complete += 1


def end_of_first(data: bytes | bytearray) -> int | None:
    """Where the first request of ``data`` ends (its length), as llhttp frames it: the shortest prefix
    a fresh parser reads a whole request in; None when there is none. Asked only when one read brought
    the end of a request and more (requests pipelined in one write)."""

    def completes(n: int) -> bool:
        ends = _Ends()
        with contextlib.suppress(httptools.HttpParserError, httptools.HttpParserUpgrade):
            httptools.HttpRequestParser(ends).feed_data(bytes(data[:n]))
        return ends.complete > 0

    lo, hi = 1, len(data)
    if not hi or not completes(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if completes(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


class Lane(asyncio.Protocol):
    """One connection, while it is served by the lane (:mod:`this module <devshare.server.extender.lane>`).
    The parser's callbacks (``on_*``) note each request as llhttp reads it; :meth:`_judge` decides, once
    its head is read, whether it is the lane's."""

    def __init__(self, lanes: Lanes) -> None:
        self.lanes = lanes
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.buffer = bytearray()  # the bytes of the requests not yet answered (or handed over)
        self.messages: list[_Message] = []  # the requests in them, as far as read
        self.ready: deque[tuple[Verb, bytes, bool]] = deque()  # complete requests to answer, in order
        self.task: asyncio.Task[None] | None = None  # the verb answering the first of them
        self.idle: asyncio.TimerHandle | None = None
        self.declined = False  # a request the lane does not serve: hand over once the answers are out
        self.eof = False  # the client will send nothing more: close once the answers under way are written
        self._paused = False  # read by aiohttp's writer before it drains (answers are small: never paused)

    # ------------------------------------------------------------------ llhttp's callbacks
    def on_message_begin(self) -> None:
        self.messages.append(_Message())

    def on_url(self, url: bytes) -> None:
        self.messages[-1].url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.messages[-1].headers.append((name, value))

    def on_headers_complete(self) -> None:
        m = self.messages[-1]
        m.head_done = True
        m.verb = self._judge(m)

    def on_body(self, body: bytes) -> None:
        m = self.messages[-1]
        if m.verb is not None:  # the body of a request the lane will not serve is aiohttp's to read
            m.body += body

    def on_message_complete(self) -> None:
        m = self.messages[-1]
        m.complete = True
        m.keep_alive = self.parser.should_keep_alive()  # (llhttp forgets it once the next message begins)

    # ------------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not asyncio.Transport subclasses
        self.lanes.open.add(self)
        self._wait_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lanes.open.discard(self)
        self.transport = None
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None

    def data_received(self, data: bytes) -> None:
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        self.buffer += data
        if self.declined:
            return  # kept for aiohttp, which takes the connection once the answers under way are out
        try:
            self.parser.feed_data(data)
            broken = False
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):  # malformed, an upgrade...: aiohttp's
            broken = True
        done = [m for m in self.messages if m.complete]  # (the first ones)
        rest = self.messages[len(done):]
        head = rest[0] if rest else None
        if broken or any(m.verb is None for m in done) or (head is not None and head.head_done and head.verb is None):
            # not all the lane's: aiohttp takes every request of these bytes, as it reads them had it read the
            # connection from the start (a request it refuses takes down those read with it)
            self._decline()
            return
        for i, m in enumerate(done):
            end = len(self.buffer) if i == len(done) - 1 and head is None else end_of_first(self.buffer)
            if end is None:  # (llhttp read a request in these bytes a moment ago: never)
                self._decline()
                return
            self.ready.append((cast(Verb, m.verb), bytes(m.body), not m.keep_alive))
            del self.buffer[:end]
        del self.messages[:len(done)]
        if head is not None and not head.head_done and len(self.buffer) > HEAD_LIMIT:
            self._decline()  # a head longer than aiohttp takes: aiohttp answers it
            return
        if self.task is None:
            self._next()

    def eof_received(self) -> bool:
        self.eof = True
        return self.task is not None  # keep the socket for the answer under way; close otherwise

    # ------------------------------------------------------------------ judging a request
    def _judge(self, m: _Message) -> Verb | None:
        """The verb of the request whose head was just read when the lane serves it (see the module's
        doc), else None."""
        p = self.parser
        verb = self.lanes.verbs.get(m.url)
        if verb is None or p.get_method() != b"POST" or p.get_http_version() != "1.1":
            return None
        if len(m.headers) > MAX_HEADERS or len(m.url) + sum(len(n) + len(v) + 4 for n, v in m.headers) > HEAD_LIMIT:
            return None
        hosts = lengths = 0
        for name, value in m.headers:
            if not PRINTABLE.issuperset(value):
                return None
            key = name.lower()
            if key == b"host":
                hosts += 1
                if not value:
                    return None
            elif key == b"content-length":
                lengths += 1
                if not value.isdigit() or len(value) > 10 or int(value) > self.lanes.max_body:
                    return None
            elif key in REFUSED or (key == b"connection"
                                    and not {t.strip().lower() for t in value.split(b",")} <= CONNECTION_TOKENS):
                return None
        if hosts != 1 or lengths != 1:
            return None
        return verb

    # ------------------------------------------------------------------ answering
    def _next(self) -> None:
        """Answer the next complete request; hand over once the answers are out if one was declined."""
        if self.ready:
            verb, body, close = self.ready.popleft()
            self.task = asyncio.get_running_loop().create_task(self._answer(verb, body, close))
        elif self.declined:
            self._hand_over()
        elif self.eof:
            self.close()
        else:
            self._wait_idle()

    async def _answer(self, verb: Verb, body: bytes, close: bool) -> None:
        try:
            status, out = await verb.answer(self.lanes.ext, body)
            self.lanes.served += 1
            transport = self.transport
            if transport is None or transport.is_closing():
                return  # the client went away: the verb ran to its end, nobody to tell
            # the headers aiohttp's responses carry, in its order; its writer frames them and the body
            headers = CIMultiDict(((hdrs.CONTENT_TYPE, "application/json"), (hdrs.CONTENT_LENGTH, str(len(out))),
                                   (hdrs.DATE, self.lanes.date()), (hdrs.SERVER, SERVER_SOFTWARE)))
            if close:
                headers[hdrs.CONNECTION] = "close"
            writer = StreamWriter(cast(BaseProtocol, self), asyncio.get_running_loop())
            await writer.write_headers(_status_line(status), headers)
            await writer.write_eof(out)
            if close:
                transport.close()
                return
            self.task = None
            self._next()
        except asyncio.CancelledError:
            self.close()
            raise
        except Exception:  # a bug here must not leave the connection waiting forever: close it
            log.exception("the lane failed to answer a %s request", verb.name)
            self.close()

    def _decline(self) -> None:
        """The request being read is not the lane's: aiohttp takes the connection, once the answers
        already under way are written (in order), with every byte not answered."""
        self.declined = True
        if self.task is None:
            self._next()

    def _hand_over(self) -> None:
        transport = self.transport
        if transport is None:
            return
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        self.lanes.open.discard(self)
        self.lanes.handed += 1
        self.transport = None
        handler = self.lanes.fallback()
        transport.set_protocol(handler)
        handler.connection_made(transport)
        if self.buffer:
            handler.data_received(bytes(self.buffer))
        self.buffer.clear()
        if self.eof:
            handler.eof_received()

    # ------------------------------------------------------------------ idle connections
    def _wait_idle(self) -> None:
        if self.idle is None and self.transport is not None:
            self.idle = asyncio.get_running_loop().call_later(self.lanes.idle_timeout, self.close)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
