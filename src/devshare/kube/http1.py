"""Kept-alive HTTP/1.1 connections to the API server, for :class:`~devshare.kube.rest.ApiRequests`' small
requests: a pod GET, a Binding, the claim ledger's reads and writes.

Each bind sends a Binding, and where the extender shares its cores with the control plane, the CPU a
request costs the client is CPU the API server and kube-scheduler do not get. aiohttp's client spent
226-322 us of CPU on such a request over TLS (its request and response objects, the URL, the
connector, the timers, the streams); writing the request in one piece and reading the answer off the
connection, 65-96 us (BENCHMARKS.md, issue 11's twelfth stop).
aiohttp keeps everything else: the watches (long streams), and every request when a proxy is set.

What is read here is what Go's HTTP/1.1 server writes: a status line ``HTTP/1.x NNN reason``, header
lines, a blank line, then a body of ``Content-Length`` bytes, or in chunks
(``Transfer-Encoding: chunked``), or up to the end of the connection when the answer gives neither.
Anything else (a head over 64 KiB, a malformed status line or chunk size, a second, different
``Content-Length``) is a :class:`ProtocolError` and the connection is closed. 1xx answers are skipped.

A connection is used again only when its last answer was read whole and did not say
``Connection: close``, and only within :data:`KEEPALIVE` seconds of that answer (aiohttp's default:
well before the API server closes an idle connection, so that a request is seldom written to a
connection the server is closing). A request that fails is never sent again: a POST may have been
carried out; the caller's error says so.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import NamedTuple

KEEPALIVE = 15.0  # seconds an idle connection is kept (aiohttp's keepalive_timeout)
LIMIT = 100  # connections open at once (aiohttp's TCPConnector limit)
HEAD_LIMIT = 65536  # bytes of a status line and headers


class Answer(NamedTuple):
    status: int
    body: bytes


class ProtocolError(ConnectionError):
    """The server's answer is not HTTP/1.1 as read here, or the connection ended before it was whole."""


class _Connection(asyncio.Protocol):
    """One connection: one request at a time, its answer parsed as the bytes come."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reusable = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[Answer] | None = None
        self._buf = bytearray()
        self._reset()

    def _reset(self) -> None:
        self._status = 0  # 0: reading the head
        self._length = -1  # bytes of body (Content-Length), -1: chunked or to the end
        self._chunked = False
        self._close = False  # Connection: close, or HTTP/1.0
        self._body = bytearray()

    # ---------------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's are not asyncio.Transport's subclasses

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            self._fail(ProtocolError("the server sent bytes no request asked for"))
            return
        self._buf += data
        try:
            self._parse()
        except ProtocolError as e:
            self._fail(e)

    def eof_received(self) -> bool:
        self._end(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc)

    # ---------------------------------------------------------------- requests
    def send(self, data: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None and self.reusable is False
        self._waiter = asyncio.get_running_loop().create_future()
        self._reset()
        self.transport.write(data)
        return self._waiter

    def close(self) -> None:
        self.reusable = False
        if self.transport is not None:
            self.transport.close()

    # ---------------------------------------------------------------- parsing
    def _parse(self) -> None:
        while self._status == 0:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > HEAD_LIMIT:
                    raise ProtocolError(f"the server's answer has a head over {HEAD_LIMIT} bytes")
                return
            head = bytes(self._buf[:end]).decode("latin-1")
            del self._buf[:end + 4]
            self._read_head(head)
        if self._chunked:
            self._read_chunks()
        elif self._length >= 0:
            if len(self._buf) >= self._length:
                self._body += self._buf[:self._length]
                del self._buf[:self._length]
                self._done()
        else:  # to the end of the connection
            self._body += self._buf
            self._buf.clear()

    def _read_head(self, head: str) -> None:
        status_line, *lines = head.split("\r\n")
        version, _, rest = status_line.partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit() or rest[3:4] not in ("", " "):
            raise ProtocolError("the server's answer does not start with an HTTP/1.x status line: "
                                f"{status_line[:80]!r}")
        status = int(code)
        if 100 <= status < 200:
            return  # 100 Continue and the like: the answer follows
        self._status = status
        self._close = version == "HTTP/1.0"
        lengths: set[str] = set()
        for line in lines:
            name, colon, value = line.partition(":")
            if not colon:
                raise ProtocolError(f"the server's answer has a header line without a colon: {line[:80]!r}")
            name, value = name.strip().lower(), value.strip()
            if name == "content-length":
                lengths.add(value)
            elif name == "transfer-encoding":
                self._chunked = value.lower().endswith("chunked")
            elif name == "connection":
                tokens = {t.strip().lower() for t in value.split(",")}
                if "close" in tokens:
                    self._close = True
                elif "keep-alive" in tokens and version == "HTTP/1.0":
                    self._close = False
        if self._chunked:
            return
        if len(lengths) > 1:
            raise ProtocolError(f"the server's answer has different Content-Length headers: {sorted(lengths)}")
        if lengths:
            value = lengths.pop()
            if not value.isdigit():
                raise ProtocolError(f"the server's answer has a Content-Length that is not a number: {value[:40]!r}")
            self._length = int(value)
        elif status in (204, 304):
            self._length = 0
        else:
            self._close = True  # the body ends with the connection

    def _read_chunks(self) -> None:
        while True:
            end = self._buf.find(b"\r\n")
            if end < 0:
                if len(self._buf) > HEAD_LIMIT:
                    raise ProtocolError("the server's answer has a chunk size line that does not end")
                return
            size_text = bytes(self._buf[:end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ProtocolError(f"the server's answer has a chunk size that is not a number: {size_text[:40]!r}"
                                    ) from None
            if size == 0:
                # the last chunk, then trailers (none from Go's server) up to an empty line
                stop = self._buf.find(b"\r\n\r\n", end)
                if stop < 0:
                    return
                del self._buf[:stop + 4]
                self._done()
                return
            if len(self._buf) < end + 2 + size + 2:
                return
            if self._buf[end + 2 + size:end + 4 + size] != b"\r\n":
                raise ProtocolError("the server's answer has a chunk that does not end with CRLF")
            self._body += self._buf[end + 2:end + 2 + size]
            del self._buf[:end + 4 + size]

    def _done(self) -> None:
        waiter, self._waiter = self._waiter, None
        leftover = bool(self._buf)
        if self._close or leftover:
            self.close()
        else:
            self.reusable = True
            self.idle_since = time.monotonic()
        if waiter is not None and not waiter.done():
            waiter.set_result(Answer(self._status, bytes(self._body)))

    def _end(self, exc: Exception | None) -> None:
        """The connection ended (the server closed it, or it broke)."""
        self.reusable = False
        waiter = self._waiter
        if waiter is None or waiter.done():
            return
        if self._status and not self._chunked and self._length < 0 and exc is None:
            self._close = True
            self._done()  # an answer whose body ends with the connection
            return
        self._waiter = None
        what = f": {exc}" if exc is not None else ""
        waiter.set_exception(ProtocolError(f"the server closed the connection before its answer was whole{what}"))

    def _fail(self, e: ProtocolError) -> None:
        waiter, self._waiter = self._waiter, None
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(e)


class Connections:
    """Requests to one server over kept-alive connections, at most :data:`LIMIT` open at once.
    ``ssl``: the TLS context (None: plain HTTP); ``host``, ``port``: where to connect."""

    def __init__(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> None:
        self.host, self.port, self.ssl = host, port, ssl_context
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(LIMIT)
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the connections belong to
        self.opened = 0  # connections made, for the tests and the curious

    async def request(self, data: bytes, *, timeout: float) -> Answer:
        """Write ``data`` (a whole HTTP/1.1 request) and read its answer, within ``timeout`` seconds.
        Raises OSError (ProtocolError, TimeoutError, ssl.SSLError among them) when it fails; the
        connection is then closed."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new event loop (e.g. a second asyncio.run): nothing of the old one is used
            self._loop, self._idle, self._slots = loop, [], asyncio.Semaphore(LIMIT)
        async with asyncio.timeout(timeout), self._slots:
            conn = self._reuse() or await self._open()
            try:
                answer = await conn.send(data)
            except BaseException:
                conn.close()
                raise
            if conn.reusable:
                self._idle.append(conn)
            return answer

    def _reuse(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            transport = conn.transport
            if conn.reusable and transport is not None and not transport.is_closing() \
                    and now - conn.idle_since < KEEPALIVE:
                conn.reusable = False
                return conn
            conn.close()
        return None

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Connection, self.host, self.port, ssl=self.ssl,
                                               server_hostname=self.host if self.ssl is not None else None)
        self.opened += 1
        return conn

    def close(self) -> None:
        for conn in self._idle:
            conn.close()
        self._idle.clear()
