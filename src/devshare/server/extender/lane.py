"""kube-scheduler's verbs served straight off the socket: the extender's lane.

kube-scheduler waits for every filter before it takes its next pod, and the extender shares its
cores with the control plane, so what serving a request costs counts twice: in CPU, and on
kube-scheduler's path. aiohttp's request machinery (its parser, streams, request and response
objects) costs about 150 us of CPU per request more than reading one plain request off the socket
(BENCHMARKS.md, issue 11's eleventh stop), and kube-scheduler sends two per pod.

So on a plain-HTTP port each connection starts in a :class:`Lane`. It serves a request itself only
when it is exactly what kube-scheduler's HTTP/1.1 client sends: ``POST`` to one of the verbs' paths,
``HTTP/1.1``, CRLF line ends, ASCII, one ``Content-Length`` and no ``Transfer-Encoding``, ``Expect``
or ``Upgrade``. The verb answers as it does through aiohttp (:class:`~devshare.server.extender.app.Verb`,
the one owner of the answer and its metrics). Anything else (another path or method, a chunked
body, a malformed head, a body over the limit) is not read further: the connection is handed, with
everything buffered, to aiohttp's own handler for the application, which answers it and every later
request of that connection as it always did. So the lane decides nothing aiohttp would answer
differently; it only skips aiohttp's cost for the one request shape that is most of the traffic.

One request at a time per connection, in order; a verb still running when the client goes away runs
to its end (a bind is never cut in the middle), as aiohttp's handlers do by default.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import logging
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import cast

from devshare.server.extender.app import MAX_BODY, Verb
from devshare.server.extender.extender import Extender

log = logging.getLogger(__name__)

# bytes of request line and headers the lane serves at most (aiohttp refuses a line longer than 8190):
# a longer head is handed over, so that aiohttp judges it
HEAD_LIMIT = 8190
IDLE_TIMEOUT = 75.0  # seconds a connection may stay idle between requests (aiohttp's keep-alive default)
HEADERS = b"Content-Type: application/json\r\nContent-Length: %d\r\nDate: %s\r\n%s\r\n"  # and the body
REFUSED = frozenset({b"transfer-encoding", b"expect", b"upgrade"})  # headers aiohttp handles, never the lane


@functools.lru_cache(maxsize=64)
def _status_line(status: int) -> bytes:
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Unknown"
    return f"HTTP/1.1 {status} {reason}\r\n".encode()


class _Date:
    """The ``Date`` header's value, formatted once a second."""

    def __init__(self) -> None:
        self.second = -1
        self.value = b""

    def __call__(self) -> bytes:
        now = int(time.time())
        if now != self.second:
            self.second, self.value = now, email.utils.formatdate(now, usegmt=True).encode()
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

    def __call__(self) -> Lane:
        return Lane(self)

    async def shutdown(self, timeout: float = 60.0) -> None:
        """Let the verbs running finish (at most ``timeout`` seconds), then close every connection."""
        running = [lane.task for lane in self.open if lane.task is not None and not lane.task.done()]
        if running:
            await asyncio.wait(running, timeout=timeout)
        for lane in list(self.open):
            lane.close()


class Lane(asyncio.Protocol):
    """One connection, while it is served by the lane (:mod:`this module <devshare.server.extender.lane>`)."""

    def __init__(self, lanes: Lanes) -> None:
        self.lanes = lanes
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.task: asyncio.Task[None] | None = None  # the verb answering the current request
        self.idle: asyncio.TimerHandle | None = None
        self.paused = False
        self.eof = False  # the client will send nothing more: close once the answer under way is written

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
        if self.task is None:
            self._next()
        elif len(self.buffer) > self.lanes.max_body + HEAD_LIMIT and not self.paused:
            self.paused = True  # a client sending ahead while its request is answered: stop reading
            assert self.transport is not None
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self.eof = True
        return self.task is not None  # keep the socket for the answer under way; close otherwise

    # ------------------------------------------------------------------ requests
    def _next(self) -> None:
        """Serve the buffered request if it is complete and the lane's to serve; hand the connection
        to aiohttp if it is not the lane's; otherwise wait for more bytes."""
        buf = self.buffer
        if not buf:
            self._wait_more()
            return
        end = buf.find(b"\r\n\r\n")
        head = bytes(buf[:end]) if end >= 0 else bytes(buf[:HEAD_LIMIT + 1])
        if head.count(b"\n") != head.count(b"\r\n") or not head.isascii():
            self._hand_over()  # bare LF line ends, or bytes only a full parser should judge
            return
        if end < 0:
            if len(buf) > HEAD_LIMIT:
                self._hand_over()
            else:
                self._wait_more()  # the rest of the head is on its way
            return
        parsed = self._parse(head) if end <= HEAD_LIMIT else None
        if parsed is None:
            self._hand_over()
            return
        verb, length, close = parsed
        start = end + 4
        if len(buf) < start + length:
            self._wait_more()  # the body is on its way
            return
        with memoryview(buf) as view:
            body = bytes(view[start:start + length])
        del buf[:start + length]
        self.task = asyncio.get_running_loop().create_task(self._answer(verb, body, close))

    def _parse(self, head: bytes) -> tuple[Verb, int, bool] | None:
        """The verb, body length and whether to close after the answer, of a head the lane serves;
        None for any other."""
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or parts[0] != b"POST" or parts[2] != b"HTTP/1.1":
            return None
        verb = self.lanes.verbs.get(parts[1])
        if verb is None:
            return None
        length: int | None = None
        close = False
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip() or line[:1] in (b" ", b"\t"):
                return None  # no colon, whitespace around the name, a folded line: aiohttp answers it
            name = name.lower()
            value = value.strip()
            if name == b"content-length":
                if length is not None or not value.isdigit():
                    return None
                length = int(value)
            elif name in REFUSED:
                return None
            elif name == b"connection":
                tokens = {t.strip().lower() for t in value.split(b",")}
                if not tokens <= {b"close", b"keep-alive"}:
                    return None
                close = b"close" in tokens
        if length is None or length > self.lanes.max_body:
            return None
        return verb, length, close

    async def _answer(self, verb: Verb, body: bytes, close: bool) -> None:
        try:
            await self._respond(verb, body, close)
        except asyncio.CancelledError:
            self.close()
            raise
        except Exception:  # a bug here must not leave the connection waiting forever: close it
            log.exception("the lane failed to answer a %s request", verb.name)
            self.close()

    async def _respond(self, verb: Verb, body: bytes, close: bool) -> None:
        status, out = await verb.answer(self.lanes.ext, body)
        self.lanes.served += 1
        transport = self.transport
        if transport is None or transport.is_closing():
            return  # the client went away: the verb ran to its end, nobody to tell
        transport.write(_status_line(status) + HEADERS % (len(out), self.lanes.date(),
                                                          b"Connection: close\r\n" if close else b"") + out)
        if close:
            transport.close()
            return
        self.task = None
        if self.paused:
            self.paused = False
            transport.resume_reading()
        self._next()

    def _hand_over(self) -> None:
        """aiohttp's handler takes the connection from here, with what is buffered."""
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
        handler.connection_made(transport)  # never paused here: only a request under way pauses reading
        if self.buffer:
            handler.data_received(bytes(self.buffer))
        self.buffer.clear()

    # ------------------------------------------------------------------ idle connections
    def _wait_more(self) -> None:
        """Wait for the client's next bytes, unless it said it sends none (then close)."""
        if self.eof:
            self.close()
        else:
            self._wait_idle()

    def _wait_idle(self) -> None:
        if self.idle is None and self.transport is not None:
            self.idle = asyncio.get_running_loop().call_later(self.lanes.idle_timeout, self.close)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()
