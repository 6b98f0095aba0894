"""The verbs' lane (server/extender/lane.py): kube-scheduler's requests parsed by llhttp (httptools) and
answered off the socket, everything else handed to aiohttp.

The lane's contract is that it answers exactly as aiohttp would: every test of equivalence sends the
same bytes to one extender served twice, once through aiohttp alone and once through the lane, and
compares the answers byte for byte (but the Date header). A hypothesis property fuzzes the requests;
the hostile cases of issues 35 and 37 (header names with spaces or control bytes, NUL or bare CR in
values, a missing or duplicated Host, a 4,300-digit Content-Length...) are among its examples."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from devshare.server.eventloop import EVENT_LOOPS, new_event_loop
from devshare.server.extender.app import VERBS, Verb
from devshare.server.extender.lane import Lanes
from devshare.server.extender.serve import RUNTIME, Runtime, Serving, build_app, serving
from support.extender import cluster, names_body, pod
from support.waiting import settled

NODES = [f"node-{i}" for i in range(3)]
LAST = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"  # ends every stream the twins compare


def request(path: str, body: bytes, *, method: str = "POST", extra: str = "") -> bytes:
    """A request as Go's HTTP/1.1 client writes it."""
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:8888\r\nUser-Agent: Go-http-client/1.1\r\n"
            f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n{extra}\r\n"
            ).encode() + body


def filter_body(name: str = "p", core: int = 50) -> bytes:
    return json.dumps(names_body(pod(name, core=core, mem="4Gi"), NODES)).encode()


BIND_NOBODY = json.dumps({"PodName": "nobody", "PodNamespace": "default", "Node": "node-0"}).encode()


@contextlib.asynccontextmanager
async def server(*, lane: bool = True, pods: list[dict[str, Any]] | None = None
                 ) -> AsyncIterator[tuple[Serving, Runtime]]:
    app = build_app(cluster(3, gpus=2, pods=pods))
    async with serving(app, "127.0.0.1", 0, lane=lane) as s:
        runtime = app[RUNTIME]
        await settled(runtime.informer.synced.wait())
        yield s, runtime


@contextlib.asynccontextmanager
async def twins() -> AsyncIterator[tuple[int, int, Lanes]]:
    """One extender application served twice: on one port through aiohttp alone, on another through
    the lane (which hands what is not its own to the same application's aiohttp handler)."""
    app = build_app(cluster(3, gpus=2))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        assert runner.server is not None
        lanes = Lanes(app[VERBS], app[RUNTIME].extender, runner.server)
        lane_server = await asyncio.get_running_loop().create_server(lanes, "127.0.0.1", 0)
        try:
            await settled(app[RUNTIME].informer.synced.wait())
            yield runner.addresses[0][1], lane_server.sockets[0].getsockname()[1], lanes
        finally:
            lane_server.close()
            await lanes.shutdown()
    finally:
        await runner.cleanup()


async def whole_answer(port: int, data: bytes, cuts: list[int] = ()) -> bytes:  # type: ignore[assignment]
    """Everything the server writes for ``data`` followed by :data:`LAST` (each piece between ``cuts``
    its own write), up to the end of the connection, the Date header's value blanked."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        data += LAST
        bounds = [0, *sorted(c for c in cuts if 0 < c < len(data)), len(data)]
        for a, b in itertools.pairwise(bounds):
            writer.write(data[a:b])
            await writer.drain()
            await asyncio.sleep(0)
        out = await settled(reader.read())
    finally:
        writer.close()
    return re.sub(rb"\r\nDate: [^\r]*\r\n", b"\r\nDate: -\r\n", out)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length: status, headers (lower-case names), body."""
    head = await settled(reader.readuntil(b"\r\n\r\n"))
    lines = head.decode().split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    body = await settled(reader.readexactly(int(headers["content-length"])))
    return status, headers, body


async def exchange(port: int, *requests: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Each request on one connection, the next sent once the answer to the last is read (as Go's
    client does: it never pipelines)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        out = []
        for data in requests:
            writer.write(data)
            await writer.drain()
            out.append(await read_response(reader))
        return out
    finally:
        writer.close()


# ---------------------------------------------------------------------------------------------- the lane's own
async def test_a_filter_is_answered_in_the_lane_byte_for_byte_as_aiohttp_answers_it() -> None:
    async with twins() as (aio, lane, _):
        data = request("/filter", filter_body())
        assert await whole_answer(lane, data, [len(data)]) == await whole_answer(aio, data)
    async with server() as (s, _):
        ((status, headers, body),) = await exchange(s.port, request("/filter", filter_body()))
        assert s.lanes is not None and (s.lanes.served, s.lanes.handed) == (1, 0)
    assert status == 200 and json.loads(body)["NodeNames"]
    assert headers["content-type"] == "application/json" and "date" in headers and "server" in headers


async def test_requests_on_one_kept_alive_connection_are_answered_in_order() -> None:
    async with server() as (s, runtime):
        answers = await exchange(s.port, request("/filter", filter_body("a")), request("/filter", filter_body("b", 30)),
                                 request("/bind", BIND_NOBODY))
        assert [a[0] for a in answers] == [200, 200, 200] and json.loads(answers[2][2])["Error"]
        assert s.lanes is not None and (s.lanes.served, s.lanes.handed) == (3, 0)
        counted = runtime.extender.metrics.requests.labels("filter", "ok")._value.get()
        assert counted == 2  # the verb's own metrics, as through aiohttp


async def test_other_paths_and_methods_are_handed_to_aiohttp() -> None:
    async with server() as (s, _):
        ((status, _, body),) = await exchange(s.port, request("/healthz", b"", method="GET"))
        assert (status, body) == (200, b"ok\n")
        # a verb first, then a read of /metrics on the same connection: the lane hands it over midway
        answers = await exchange(s.port, request("/filter", filter_body()), request("/metrics", b"", method="GET"))
        assert [a[0] for a in answers] == [200, 200]
        assert b"devshare_extender_requests_total" in answers[1][2]
        assert b"devshare_extender_lane_requests_total 1.0" in answers[1][2]
        assert b"devshare_extender_lane_handovers_total 2.0" in answers[1][2]  # /healthz, and this very read
        assert b"devshare_extender_lane_connections_total 2.0" in answers[1][2]  # one for each exchange
        assert s.lanes is not None and (s.lanes.served, s.lanes.handed) == (1, 2)


async def test_connection_close_is_honoured() -> None:
    async with server() as (s, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(request("/filter", filter_body(), extra="Connection: close\r\n"))
        status, headers, _ = await read_response(reader)
        assert status == 200 and headers["connection"] == "close"
        assert await settled(reader.read()) == b""  # the server closed it
        writer.close()
        assert s.lanes is not None and s.lanes.served == 1


async def test_a_half_closed_client_still_gets_its_answer() -> None:
    async with server() as (s, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(request("/filter", filter_body()))
        await writer.drain()
        sock = writer.get_extra_info("socket")
        sock.shutdown(socket.SHUT_WR)
        status, _, _ = await read_response(reader)
        assert status == 200
        assert await settled(reader.read()) == b""
        writer.close()


async def test_idle_connections_are_closed() -> None:
    async with server() as (s, _):
        assert s.lanes is not None
        s.lanes.idle_timeout = 0.05
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(request("/filter", filter_body())[:20])  # half a head, then nothing
        assert await settled(reader.read()) == b""
        writer.close()


async def test_a_bind_in_the_lane_binds() -> None:
    async with server(pods=[pod("p", core=50, mem="4Gi")]) as (s, runtime):
        (filtered,) = await exchange(s.port, request("/filter", filter_body()))
        node = json.loads(filtered[2])["NodeNames"][0]
        body = json.dumps({"PodName": "p", "PodNamespace": "default", "PodUID": "uid-default-p", "Node": node})
        ((status, _, out),) = await exchange(s.port, request("/bind", body.encode()))
        assert s.lanes is not None and s.lanes.served == 2
    assert status == 200 and json.loads(out) == {"Error": ""}
    assert "default/p" in runtime.state.pods


async def test_a_failure_of_the_lane_itself_closes_the_connection_never_leaves_it_waiting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(self: Verb, ext: Any, body: bytes) -> tuple[int, bytes]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Verb, "answer", broken)  # Verb.answer itself never raises: stand in for a bug around it
    async with server() as (s, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(request("/filter", filter_body()))
        assert await settled(reader.read()) == b""
        writer.close()


# ---------------------------------------------------------------------------------------------- aiohttp's
def raw(*lines: bytes, body: bytes = b"", eol: bytes = b"\r\n") -> bytes:
    return b"".join(line + eol for line in lines) + eol + body


F = filter_body()
CL = b"Content-Length: %d" % len(F)
HOSTILE = {
    "space in a header name": raw(b"POST /filter HTTP/1.1", b"Host: x", b"X Y: a", CL, body=F),
    "space before the colon": raw(b"POST /filter HTTP/1.1", b"Host: x", b"Content-Length : %d" % len(F), body=F),
    "control byte in a name": raw(b"POST /filter HTTP/1.1", b"Host: x", b"X\x01Y: a", CL, body=F),
    "NUL in a value": raw(b"POST /filter HTTP/1.1", b"Host: x", b"X: a\x00b", CL, body=F),
    "bare CR in a value": raw(b"POST /filter HTTP/1.1", b"Host: x", b"X: a\rb", CL, body=F),
    "DEL in a value": raw(b"POST /filter HTTP/1.1", b"Host: x", b"X: a\x7fb", CL, body=F),
    "obs-text in a value": raw(b"POST /filter HTTP/1.1", b"Host: x", b"X: caf\xc3\xa9", CL, body=F),
    "missing Host": raw(b"POST /filter HTTP/1.1", CL, body=F),
    "duplicated Host": raw(b"POST /filter HTTP/1.1", b"Host: x", b"Host: y", CL, body=F),
    "empty Host": raw(b"POST /filter HTTP/1.1", b"Host:", CL, body=F),
    "4,300-digit Content-Length": raw(b"POST /filter HTTP/1.1", b"Host: x", b"Content-Length: " + b"9" * 4300, body=F),
    "two Content-Lengths": raw(b"POST /filter HTTP/1.1", b"Host: x", CL, b"Content-Length: 6", body=F),
    "the same Content-Length twice": raw(b"POST /filter HTTP/1.1", b"Host: x", CL, CL, body=F),
    "negative Content-Length": raw(b"POST /filter HTTP/1.1", b"Host: x", b"Content-Length: -1"),
    "signed Content-Length": raw(b"POST /filter HTTP/1.1", b"Host: x", b"Content-Length: +%d" % len(F), body=F),
    "no Content-Length": raw(b"POST /filter HTTP/1.1", b"Host: x"),
    "chunked": raw(b"POST /filter HTTP/1.1", b"Host: x", b"Transfer-Encoding: chunked",
                   body=b"%x\r\n%s\r\n0\r\n\r\n" % (len(F), F)),
    "chunked and a length": raw(b"POST /filter HTTP/1.1", b"Host: x", b"Transfer-Encoding: chunked", CL,
                                body=b"%x\r\n%s\r\n0\r\n\r\n" % (len(F), F)),
    "Expect": raw(b"POST /filter HTTP/1.1", b"Host: x", b"Expect: 100-continue", CL, body=F),
    "folded header": raw(b"POST /filter HTTP/1.1", b"Host: x", b"X: a", b" b", CL, body=F),
    "bare line feeds": raw(b"POST /filter HTTP/1.1", b"Host: x", CL, body=F, eol=b"\n"),
    "HTTP/1.0": raw(b"POST /filter HTTP/1.0", b"Host: x", CL, body=F),
    "lower-case method": raw(b"post /filter HTTP/1.1", b"Host: x", CL, body=F),
    "absolute-form target": raw(b"POST http://x/filter HTTP/1.1", b"Host: x", CL, body=F),
    "a query": raw(b"POST /filter?x=1 HTTP/1.1", b"Host: x", CL, body=F),
    "an escaped path": raw(b"POST /%66ilter HTTP/1.1", b"Host: x", CL, body=F),
    "a head over 8190 bytes": raw(b"POST /filter HTTP/1.1", b"Host: x", b"X: " + b"a" * 9000, CL, body=F),
    "a body that is not JSON": raw(b"POST /filter HTTP/1.1", b"Host: x", b"Content-Length: 5", body=b"{not "),
    "pipelined": request("/filter", F) + request("/prioritize", F),
    "a GET": request("/healthz", b"", method="GET"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
async def test_hostile_requests_get_what_aiohttp_answers(name: str) -> None:
    async with twins() as (aio, lane, _):
        expected = await whole_answer(aio, HOSTILE[name])
        assert await whole_answer(lane, HOSTILE[name]) == expected


async def test_an_upgrade_gets_what_aiohttp_answers() -> None:
    """(aiohttp keeps an upgraded connection open: the first answers are compared.)"""
    upgrade = raw(b"POST /filter HTTP/1.1", b"Host: x", b"Connection: upgrade", b"Upgrade: h2c", CL, body=F)
    async with twins() as (aio, lane, lanes):
        first = [await exchange(port, upgrade) for port in (aio, lane)]
        assert [(s, b) for s, _, b in first[0]] == [(s, b) for s, _, b in first[1]]
        assert lanes.served == 0 and lanes.handed == 1


ALWAYS_OK = [b"Host: 127.0.0.1:8888", b"User-Agent: Go-http-client/1.1", b"Content-Type: application/json",
             b"Accept-Encoding: gzip"]
header_line = st.one_of(
    st.sampled_from([*ALWAYS_OK, b"Host: x", b"Host:", b"Connection: close", b"Connection: keep-alive",
                     b"Transfer-Encoding: chunked", b"Expect: 100-continue", b"TE: trailers",
                     b"Content-Length: 0", b"X:\tb", b"X : b", b" X: b"]),
    st.tuples(st.binary(min_size=1, max_size=8), st.binary(max_size=12)).map(lambda nv: nv[0] + b": " + nv[1]),
)


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """A request near what kube-scheduler sends, with any of its parts changed: method, target, version,
    line ends, headers (Host and Content-Length kept, dropped, doubled or bent), body."""
    method = draw(st.sampled_from([b"POST", b"POST", b"GET", b"PUT", b"post"]))
    target = draw(st.sampled_from([b"/filter", b"/prioritize", b"/bind", b"/preempt", b"/filter", b"/healthz",
                                   b"/filter?x", b"//filter", b"/filter/", b"/Filter", b"*"]))
    version = draw(st.sampled_from([b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/1.2", b"HTTP/2.0"]))
    body = draw(st.sampled_from([F, F, BIND_NOBODY, b"{", b"", b"[]"]))
    headers = draw(st.lists(header_line, max_size=4))
    host = draw(st.sampled_from([[b"Host: x"], [b"Host: x"], [], [b"Host: x", b"Host: x"]]))
    length = draw(st.sampled_from(["exact", "exact", "exact", "none", "twice", "4300", "short", "+"]))
    lengths = {"exact": [b"Content-Length: %d" % len(body)], "none": [],
               "twice": [b"Content-Length: %d" % len(body)] * 2, "4300": [b"Content-Length: " + b"7" * 4300],
               "short": [b"Content-Length: %d" % max(len(body) - 1, 0)], "+": [b"Content-Length: +%d" % len(body)]}
    lines = draw(st.permutations([*host, *lengths[length], *headers]))
    eol = draw(st.sampled_from([b"\r\n", b"\r\n", b"\r\n", b"\n"]))
    return raw(b"%s %s %s" % (method, target, version), *lines, body=body, eol=eol)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=st.lists(requests(), min_size=1, max_size=3), loop=st.sampled_from(EVENT_LOOPS[1:]))
@example(stream=[HOSTILE["NUL in a value"]], loop="uvloop")
@example(stream=[request("/filter", F), HOSTILE["4,300-digit Content-Length"]], loop="asyncio")
def test_any_bytes_get_the_answers_aiohttp_gives(stream: list[bytes], loop: str) -> None:
    """Whatever the bytes (sent in one write), on either event loop: the lane's port answers exactly what
    aiohttp's does (every byte but the dates), in the same order, and closes when it closes. (How
    aiohttp answers bytes it refuses depends on how they are cut into reads: it drops the requests read
    with a refused one. The lane hands aiohttp such reads whole, so it answers them as it would have.)"""
    data = b"".join(stream)

    async def both() -> tuple[bytes, bytes]:
        async with twins() as (aio, lane, _):
            return await whole_answer(aio, data), await whole_answer(lane, data)

    with asyncio.Runner(loop_factory=lambda: new_event_loop(loop)) as runner:
        expected, got = runner.run(both())
    assert got == expected


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kinds=st.lists(st.sampled_from(["filter", "prioritize", "bad", "bind", "healthz"]), min_size=1, max_size=4),
       cuts=st.lists(st.integers(min_value=1, max_value=4000), max_size=12), loop=st.sampled_from(EVENT_LOOPS[1:]))
def test_any_cut_of_valid_requests_gets_the_answers_one_write_gets(kinds: list[str], cuts: list[int],
                                                                  loop: str) -> None:
    """However the bytes of a stream of valid requests are cut into writes (valid: aiohttp's answers do
    not depend on the cuts then), the lane answers them as aiohttp answers the whole."""
    parts = {"filter": request("/filter", F), "prioritize": request("/prioritize", F),
             "bad": request("/filter", b"[1, 2"), "bind": request("/bind", BIND_NOBODY),
             "healthz": request("/healthz", b"", method="GET")}
    data = b"".join(parts[k] for k in kinds)

    async def both() -> tuple[bytes, bytes, int]:
        async with twins() as (aio, lane, lanes):
            return await whole_answer(aio, data), await whole_answer(lane, data, cuts), lanes.served

    with asyncio.Runner(loop_factory=lambda: new_event_loop(loop)) as runner:
        expected, got, served = runner.run(both())
    assert got == expected
    assert served <= len(kinds) - kinds.count("healthz")
