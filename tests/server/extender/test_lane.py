"""The verbs' lane: kube-scheduler's requests read off the socket, everything else handed to aiohttp.

Every test talks to a real port opened by :func:`serving` (the extender's own server code), with
raw bytes, so that what is on the wire is exactly what is tested."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devshare.server.eventloop import EVENT_LOOPS, new_event_loop
from devshare.server.extender.app import Verb
from devshare.server.extender.serve import RUNTIME, Runtime, Serving, build_app, serving
from support.extender import cluster, names_body, pod

NODES = [f"node-{i}" for i in range(3)]


def request(path: str, body: bytes, *, method: str = "POST", extra: str = "") -> bytes:
    """A request as Go's HTTP/1.1 client writes it."""
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:8888\r\nUser-Agent: Go-http-client/1.1\r\n"
            f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\nAccept-Encoding: gzip\r\n{extra}\r\n"
            ).encode() + body


def filter_body(name: str = "p", core: int = 50) -> bytes:
    return json.dumps(names_body(pod(name, core=core, mem="4Gi"), NODES)).encode()


@contextlib.asynccontextmanager
async def server(*, lane: bool = True, pods: list[dict[str, Any]] | None = None
                 ) -> AsyncIterator[tuple[Serving, Runtime]]:
    app = build_app(cluster(3, gpus=2, pods=pods))
    async with serving(app, "127.0.0.1", 0, lane=lane) as s:
        runtime = app[RUNTIME]
        await asyncio.wait_for(runtime.informer.synced.wait(), 10)
        yield s, runtime


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length: status, headers (lower-case names), body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    lines = head.decode().split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 10)
    return status, headers, body


async def exchange(port: int, data: bytes, count: int, *, pieces: list[int] | None = None
                   ) -> list[tuple[int, dict[str, str], bytes]]:
    """Send ``data`` (cut at ``pieces``, each piece its own write) on one connection; read ``count`` answers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        cuts = [0, *sorted(c for c in (pieces or []) if 0 < c < len(data)), len(data)]
        for a, b in itertools.pairwise(cuts):
            writer.write(data[a:b])
            await writer.drain()
            await asyncio.sleep(0)
        return [await read_response(reader) for _ in range(count)]
    finally:
        writer.close()


async def test_a_filter_is_answered_in_the_lane_as_aiohttp_answers_it() -> None:
    async with server(lane=False) as (plain, _):
        ((status_a, _, body_a),) = await exchange(plain.port, request("/filter", filter_body()), 1)
    async with server() as (s, _):
        ((status, headers, body),) = await exchange(s.port, request("/filter", filter_body()), 1)
        assert s.lanes is not None and (s.lanes.served, s.lanes.handed) == (1, 0)
    assert (status, body) == (status_a, body_a) == (200, body)
    assert json.loads(body)["NodeNames"]
    assert headers["content-type"] == "application/json" and "date" in headers


async def test_requests_on_one_kept_alive_connection_are_answered_in_order() -> None:
    async with server() as (s, runtime):
        data = request("/filter", filter_body("a")) + request("/filter", filter_body("b", core=30))
        answers = await exchange(s.port, data, 2)
        assert [a[0] for a in answers] == [200, 200]
        assert s.lanes is not None and s.lanes.served == 2
        counted = runtime.extender.metrics.requests.labels("filter", "ok")._value.get()
        assert counted == 2  # the verb's own metrics, as through aiohttp


async def test_a_request_in_many_small_writes_is_read_whole() -> None:
    async with server() as (s, _):
        data = request("/filter", filter_body())
        ((status, _, body),) = await exchange(s.port, data, 1, pieces=list(range(1, len(data), 7)))
    assert status == 200 and json.loads(body)["NodeNames"]


async def test_a_body_that_is_not_json_gets_the_verbs_400() -> None:
    async with server() as (s, _):
        ((status, _, body),) = await exchange(s.port, request("/filter", b"{not json"), 1)
    assert status == 400
    assert json.loads(body)["error"].startswith("filter: ")


async def test_other_paths_and_methods_are_handed_to_aiohttp() -> None:
    async with server() as (s, _):
        ((status, _, body),) = await exchange(s.port, request("/healthz", b"", method="GET"), 1)
        assert (status, body) == (200, b"ok\n")
        # a verb first, then a read of /metrics on the same connection: the lane hands it over midway
        answers = await exchange(s.port, request("/filter", filter_body()) + request("/metrics", b"", method="GET"), 2)
        assert [a[0] for a in answers] == [200, 200]
        assert b"devshare_extender_requests_total" in answers[1][2]
        assert b"devshare_extender_lane_requests_total 1.0" in answers[1][2]
        assert b"devshare_extender_lane_handovers_total 2.0" in answers[1][2]  # /healthz, and this very read
        assert s.lanes is not None and (s.lanes.served, s.lanes.handed) == (1, 2)


async def test_a_chunked_verb_is_handed_to_aiohttp_and_answered_the_same() -> None:
    body = filter_body()
    chunked = (b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
               b"Content-Type: application/json\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
    async with server() as (s, _):
        ((status_c, _, body_c),) = await exchange(s.port, chunked, 1)
        ((status_l, _, body_l),) = await exchange(s.port, request("/filter", body), 1)
        assert s.lanes is not None and (s.lanes.served, s.lanes.handed) == (1, 1)
    assert (status_c, body_c) == (status_l, body_l)


async def test_malformed_heads_get_aiohttps_answer_never_a_hang() -> None:
    body = filter_body()
    bad = [
        b"POST /filter HTTP/1.1\r\nContent-Length : %d\r\n\r\n" % len(body) + body,  # space before the colon
        b"POST /filter HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n{}",  # two lengths
        b"POST /filter HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        b"POST /filter HTTP/1.1\r\nContent-Length: %d\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n" % len(body)
        + body,
    ]
    async with server() as (s, _):
        for data in bad:
            ((status, _, _),) = await exchange(s.port, data, 1)
            assert status == 400, data
        assert s.lanes is not None and s.lanes.served == 0 and s.lanes.handed == len(bad)


async def test_a_head_longer_than_aiohttp_takes_is_left_to_aiohttp() -> None:
    async with server() as (s, _):
        long_head = request("/filter", filter_body(), extra=f"X-Long: {'a' * 9000}\r\n")
        ((status, _, _),) = await exchange(s.port, long_head, 1)
        assert s.lanes is not None and (s.lanes.served, s.lanes.handed) == (0, 1)
    assert status == 400  # aiohttp's "Got more than 8190 bytes"


async def test_bare_line_feeds_are_handed_over() -> None:
    body = filter_body()
    async with server() as (s, _):
        ((status, _, out),) = await exchange(s.port, b"POST /filter HTTP/1.1\nContent-Length: %d\n\n" % len(body)
                                             + body, 1)
        assert s.lanes is not None and s.lanes.handed == 1
    assert status in (200, 400)  # aiohttp's call, whichever it makes
    if status == 200:
        assert json.loads(out)["NodeNames"]


async def test_a_body_over_the_lanes_limit_is_left_to_aiohttps() -> None:
    """Over the limit, aiohttp's own (MAX_BODY for both) answers 413: the lane never reads the body."""
    async with server() as (s, _):
        assert s.lanes is not None
        s.lanes.max_body = 100  # below the application's, so that aiohttp's answer shows
        ((status, _, body),) = await exchange(s.port, request("/filter", filter_body()), 1)
        assert (s.lanes.served, s.lanes.handed) == (0, 1)
    assert status == 200 and json.loads(body)["NodeNames"]


async def test_connection_close_is_honoured() -> None:
    async with server() as (s, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(request("/filter", filter_body(), extra="Connection: close\r\n"))
        status, headers, _ = await read_response(reader)
        assert status == 200 and headers["connection"] == "close"
        assert await asyncio.wait_for(reader.read(), 10) == b""  # the server closed it
        writer.close()


async def test_a_half_closed_client_still_gets_its_answer() -> None:
    async with server() as (s, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(request("/filter", filter_body()))
        await writer.drain()
        sock = writer.get_extra_info("socket")
        sock.shutdown(socket.SHUT_WR)
        status, _, _ = await read_response(reader)
        assert status == 200
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()


async def test_idle_connections_are_closed() -> None:
    async with server() as (s, _):
        assert s.lanes is not None
        s.lanes.idle_timeout = 0.05
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(request("/filter", filter_body())[:20])  # half a head, then nothing
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()


async def test_a_bind_in_the_lane_binds() -> None:
    async with server(pods=[pod("p", core=50, mem="4Gi")]) as (s, runtime):
        (filtered,) = await exchange(s.port, request("/filter", filter_body()), 1)
        node = json.loads(filtered[2])["NodeNames"][0]
        body = json.dumps({"PodName": "p", "PodNamespace": "default", "PodUID": "uid-default-p", "Node": node})
        ((status, _, out),) = await exchange(s.port, request("/bind", body.encode()), 1)
    assert status == 200 and json.loads(out) == {"Error": ""}
    assert "default/p" in runtime.state.pods


def run(coro: Any, loop: str) -> Any:
    with asyncio.Runner(loop_factory=lambda: new_event_loop(loop)) as runner:
        return runner.run(coro)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kinds=st.lists(st.sampled_from(["filter", "bad", "healthz"]), min_size=1, max_size=4),
       cuts=st.lists(st.integers(min_value=1, max_value=4000), max_size=12),
       loop=st.sampled_from(EVENT_LOOPS[1:]))
def test_any_cut_of_any_stream_gets_the_answers_one_write_gets(kinds: list[str], cuts: list[int], loop: str) -> None:
    """However the bytes of a stream of requests are cut into writes, the answers are the same, in
    order, and the lane hands over exactly at the first request that is not its own; on either
    event loop (uvloop's transports are not asyncio's)."""
    parts = {"filter": request("/filter", filter_body()), "bad": request("/filter", b"[1, 2"),
             "healthz": request("/healthz", b"", method="GET")}
    data = b"".join(parts[k] for k in kinds)

    async def both() -> tuple[list[Any], list[Any], tuple[int, int]]:
        async with server() as (s, _):
            whole = await exchange(s.port, data, len(kinds))
            cut = await exchange(s.port, data, len(kinds), pieces=cuts)
            assert s.lanes is not None
            return whole, cut, (s.lanes.served, s.lanes.handed)

    whole, cut, (served, handed) = run(both(), loop)
    assert [(a[0], a[2]) for a in whole] == [(a[0], a[2]) for a in cut]
    expected = {"filter": 200, "bad": 400, "healthz": 200}
    assert [a[0] for a in whole] == [expected[k] for k in kinds]
    own = kinds.index("healthz") if "healthz" in kinds else len(kinds)
    assert served == 2 * own and handed == (2 if own < len(kinds) else 0)


async def test_a_failure_of_the_lane_itself_closes_the_connection_never_leaves_it_waiting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(self: Verb, ext: Any, body: bytes) -> tuple[int, bytes]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Verb, "answer", broken)  # Verb.answer itself never raises: stand in for a bug around it
    async with server() as (s, _):
        reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
        writer.write(request("/filter", filter_body()))
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
