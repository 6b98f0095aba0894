"""http1.Connections against a raw server that writes exactly the bytes a test gives: answers by
Content-Length, in chunks, up to the end of the connection; kept-alive connections used again and
closed ones not; malformed answers refused with the connection closed; and a property: however the
server's bytes are cut into writes, the answers are the same."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import uvloop
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devshare.kube import http1
from devshare.kube.http1 import Answer, Connections, ProtocolError

REQUEST = b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}"


class RawServer:
    """Answers the n-th request read on any connection with ``answers[n]``: a list of byte strings,
    each written on its own (and drained) so that the client reads them in those pieces; ``None`` in
    the list closes the connection there."""

    def __init__(self, answers: list[list[bytes | None]]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                for piece in self.answers[len(self.requests) - 1]:
                    if piece is None:
                        writer.close()
                        return
                    writer.write(piece)
                    await writer.drain()
                    await asyncio.sleep(0)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()


Make = Callable[[list[list[bytes | None]]], Awaitable[tuple[RawServer, Connections]]]


@pytest.fixture
async def raw() -> AsyncIterator[Make]:
    servers: list[RawServer] = []
    clients: list[Connections] = []

    async def make(answers: list[list[bytes | None]]) -> tuple[RawServer, Connections]:
        server = RawServer(answers)
        port = await server.start()
        servers.append(server)
        clients.append(Connections("127.0.0.1", port, None))
        return server, clients[-1]

    yield make
    for c in clients:
        c.close()
    for s in servers:
        await s.stop()


def ok(body: bytes, *, status: str = "201 Created", extra: bytes = b"") -> bytes:
    return (f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n".encode()
            + extra + b"\r\n" + body)


def chunked(*chunks: bytes, trailers: bytes = b"") -> bytes:
    out = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    for c in chunks:
        out += f"{len(c):x}\r\n".encode() + c + b"\r\n"
    return out + b"0\r\n" + trailers + b"\r\n"


async def test_answers_by_length_reuse_one_connection(raw: Make) -> None:
    server, conns = await raw([[ok(b'{"a":1}')], [ok(b"")], [ok(b"{}", status="404 Not Found")]])
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b'{"a":1}')
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b"")
    assert await conns.request(REQUEST, timeout=5) == Answer(404, b"{}")
    assert server.connections == 1 and conns.opened == 1
    assert server.requests == [REQUEST] * 3


async def test_chunked_answers_with_extensions_and_trailers(raw: Make) -> None:
    body = chunked(b'{"kind":', b'"Pod"}').replace(b"6\r\n", b"6;name=v\r\n", 1)
    _, conns = await raw([[body], [chunked(b"x" * 5000, trailers=b"X-T: 1\r\n")], [chunked()]])
    assert await conns.request(REQUEST, timeout=5) == Answer(200, b'{"kind":"Pod"}')
    assert await conns.request(REQUEST, timeout=5) == Answer(200, b"x" * 5000)
    assert await conns.request(REQUEST, timeout=5) == Answer(200, b"")
    assert conns.opened == 1


async def test_a_body_up_to_the_end_of_the_connection_and_connection_close(raw: Make) -> None:
    server, conns = await raw([[b"HTTP/1.1 200 OK\r\n\r\nall of it", None],
                               [ok(b"1", extra=b"Connection: close\r\n")],
                               [b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n2"],
                               [ok(b"3")]])
    assert await conns.request(REQUEST, timeout=5) == Answer(200, b"all of it")
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b"1")
    assert await conns.request(REQUEST, timeout=5) == Answer(200, b"2")  # HTTP/1.0: not kept
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b"3")
    assert conns.opened == server.connections == 4


async def test_informational_answers_are_skipped_and_204_has_no_body(raw: Make) -> None:
    _, conns = await raw([[b"HTTP/1.1 100 Continue\r\n\r\n", ok(b"{}")],
                          [b"HTTP/1.1 204 No Content\r\n\r\n"], [ok(b"z")]])
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b"{}")
    assert await conns.request(REQUEST, timeout=5) == Answer(204, b"")
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b"z")
    assert conns.opened == 1


@pytest.mark.parametrize("answer, says", [
    (b"HTTP/2 200 OK\r\n\r\n", "status line"),
    (b"HTTP/1.1 2x0 OK\r\n\r\n", "status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", "without a colon"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "different Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "not a number"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "chunk size"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY", "CRLF"),
    (b"HTTP/1.1 200 OK\r\nX: " + b"a" * (http1.HEAD_LIMIT + 10), "head over"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "closed the connection"),
])
async def test_malformed_or_cut_answers_fail_and_close_the_connection(raw: Make, answer: bytes, says: str) -> None:
    _, conns = await raw([[answer, None], [ok(b"next")]])
    with pytest.raises(ProtocolError, match=says):
        await conns.request(REQUEST, timeout=5)
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b"next")
    assert conns.opened == 2


async def test_bytes_after_an_answer_make_the_connection_unusable(raw: Make) -> None:
    _, conns = await raw([[ok(b"a") + b"HTTP/1.1 200 OK\r\n"], [ok(b"b")]])
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b"a")
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b"b")
    assert conns.opened == 2


async def test_a_connection_the_server_closed_while_idle_is_not_used(raw: Make) -> None:
    _, conns = await raw([[ok(b"a"), None], [ok(b"b")]])
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b"a")
    await asyncio.sleep(0.05)  # the close reaches the client
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b"b")
    assert conns.opened == 2


async def test_an_idle_connection_is_dropped_after_the_keepalive(raw: Make, monkeypatch: pytest.MonkeyPatch) -> None:
    _, conns = await raw([[ok(b"a")], [ok(b"b")]])
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b"a")
    monkeypatch.setattr(http1, "KEEPALIVE", 0.0)
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b"b")
    assert conns.opened == 2


async def test_a_request_past_its_timeout_fails_and_its_connection_is_closed(raw: Make) -> None:
    _, conns = await raw([[b"HTTP/1.1 200 OK\r\nContent-Len"], [ok(b"b")]])
    with pytest.raises(TimeoutError):
        await conns.request(REQUEST, timeout=0.2)
    assert await conns.request(REQUEST, timeout=5) == Answer(201, b"b")
    assert conns.opened == 2


async def test_a_refused_connection_is_an_oserror() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(OSError):
        await Connections("127.0.0.1", port, None).request(REQUEST, timeout=5)


async def test_concurrent_requests_each_get_their_own_answer(raw: Make) -> None:
    n = 20
    _, conns = await raw([[ok(b"same")] for _ in range(n)])
    answers = await asyncio.gather(*(conns.request(REQUEST, timeout=5) for _ in range(n)))
    assert answers == [Answer(201, b"same")] * n
    assert 1 <= conns.opened <= n


ANSWERS = [ok(b'{"kind":"Status","code":201}'), chunked(b'{"a":', b"1}"), ok(b"", status="409 Conflict"),
           b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"x"), chunked(b"y" * 300, trailers=b"T: v\r\n")]
EXPECTED = [Answer(201, b'{"kind":"Status","code":201}'), Answer(200, b'{"a":1}'), Answer(409, b""),
            Answer(201, b"x"), Answer(200, b"y" * 300)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.lists(st.integers(0, len(ANSWERS) - 1), min_size=1, max_size=4), data=st.data(),
       loop=st.sampled_from(["asyncio", "uvloop"]))
def test_any_cut_of_the_servers_bytes_gives_the_same_answers(order: list[int], data: st.DataObject, loop: str) -> None:
    """On both event loops the extender may run (uvloop's transports are not asyncio's classes)."""
    answers: list[list[bytes | None]] = []
    for i in order:
        whole = ANSWERS[i]
        cuts = sorted(set(data.draw(st.lists(st.integers(1, len(whole) - 1), max_size=6))))
        answers.append([whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True)])

    async def run() -> list[Answer]:
        server = RawServer(answers)
        port = await server.start()
        conns = Connections("127.0.0.1", port, None)
        try:
            return [await conns.request(REQUEST, timeout=5) for _ in order]
        finally:
            conns.close()
            await server.stop()

    got = uvloop.run(run()) if loop == "uvloop" else asyncio.run(run())
    assert got == [EXPECTED[i] for i in order]


def test_a_new_event_loop_opens_new_connections() -> None:
    """Connections belong to the loop that made them: a second asyncio.run never uses the first's."""
    async def one(conns: Connections | None) -> Connections:
        server = RawServer([[ok(b"a")]])
        port = await server.start()
        conns = conns or Connections("127.0.0.1", port, None)
        conns.port = port
        try:
            assert await conns.request(REQUEST, timeout=5) == Answer(201, b"a")
        finally:
            await server.stop()
        return conns

    conns = asyncio.run(one(None))
    asyncio.run(one(conns))
    assert conns.opened == 2
