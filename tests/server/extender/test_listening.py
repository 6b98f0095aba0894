"""Where and how the extender listens (server/extender/listening.py): the address check of its API port,
the read-only port's guard, and the start-up line that says both."""

from __future__ import annotations

import ipaddress
import socket

import aiohttp
import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st

from devshare.server.extender.listening import READ_ONLY, is_loopback, listen_check, listening_line, read_only_on

# --- where the extender may listen without TLS (moved from tests/server/test_tls.py) ----------------


def test_listen_check() -> None:
    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        assert listen_check(host, tls=False, insecure=False) is None
    for host in ("0.0.0.0", "::", "10.0.0.5", "my-host"):
        with pytest.raises(ValueError, match="--tls-client-ca"):
            listen_check(host, tls=False, insecure=False)
        warning = listen_check(host, tls=False, insecure=True)
        assert warning is not None and "anyone" in warning
        assert listen_check(host, tls=True, insecure=False) is None


@given(st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)))
def test_only_loopback_addresses_may_listen_in_the_clear(
        address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
    """Whoever reaches /bind can bind any pod anywhere: without TLS, any address another machine can
    reach is refused, with the flags that fix it named."""
    host = str(address)
    assert is_loopback(host) == address.is_loopback
    if address.is_loopback:
        assert listen_check(host, tls=False, insecure=False) is None
    else:
        with pytest.raises(ValueError, match=f"refusing to listen on {host} without TLS") as e:
            listen_check(host, tls=False, insecure=False)
        assert all(flag in str(e.value) for flag in ("--tls-cert", "--tls-key", "--tls-client-ca", "--insecure"))
        warning = listen_check(host, tls=False, insecure=True)
        assert warning is not None and warning.startswith(f"INSECURE: listening on {host} in plain HTTP")


def test_a_name_is_not_known_to_be_loopback() -> None:
    assert is_loopback("localhost")
    assert not is_loopback("localhost.example")  # a name may resolve to anything
    assert not is_loopback("")


# --- the start-up line (moved from tests/server/extender/test_serve_ports.py) -----------------------


def test_the_listening_line_says_where_and_how() -> None:
    line = listening_line("127.0.0.1", 8888, tls=True, client_auth=True, read_only=("0.0.0.0", 9888))
    assert line == ("devshare extender listening: kube-scheduler's requests on https://127.0.0.1:8888 (TLS, client "
                    "certificate required); read-only port (/metrics, /healthz, /readyz, /inspect, /ui) on "
                    "https://0.0.0.0:9888 (TLS)")
    line = listening_line("127.0.0.1", 8888, tls=False, client_auth=False, read_only=None)
    assert line.endswith("on http://127.0.0.1:8888 (plain HTTP); no read-only port (--metrics-port 0)")


def test_the_listening_line_of_tls_without_client_certificates() -> None:
    line = listening_line("::1", 8888, tls=True, client_auth=False, read_only=("127.0.0.1", 9888))
    assert "on https://::1:8888 (TLS);" in line and line.endswith("on https://127.0.0.1:9888 (TLS)")


# --- the read-only port's guard ---------------------------------------------------------------------


async def ok(request: web.Request) -> web.Response:
    return web.Response(text=f"served {request.method} {request.path}")


async def test_the_read_only_port_serves_only_reads_of_its_paths() -> None:
    """One app on two ports: on the read-only one, only GET and HEAD of the read-only paths (and / and
    /ui/...) reach a handler; everything else is 404 naming what is served there. The other port is
    untouched."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        ro = s.getsockname()[1]
    app = web.Application(middlewares=[read_only_on(ro)])
    app.router.add_route("*", "/{tail:.*}", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        api_site = web.TCPSite(runner, "127.0.0.1", 0)
        await api_site.start()
        await web.TCPSite(runner, "127.0.0.1", ro).start()
        api = api_site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        async with aiohttp.ClientSession() as http:
            for path in (*READ_ONLY, "/", "/ui/", "/ui/occupancy"):
                for method in ("GET", "HEAD"):
                    async with http.request(method, f"http://127.0.0.1:{ro}{path}") as r:
                        assert r.status == 200, (method, path)
            for method, path in (("POST", "/bind"), ("POST", "/filter"), ("GET", "/bind"), ("POST", "/metrics"),
                                 ("DELETE", "/healthz"), ("GET", "/uix"), ("GET", "/metrics/x")):
                async with http.request(method, f"http://127.0.0.1:{ro}{path}") as r:
                    assert r.status == 404, (method, path)
                    assert await r.text() == (f"not served on the read-only port {ro}: "
                                              "/metrics, /healthz, /readyz, /inspect, /ui only\n")
                async with http.request(method, f"http://127.0.0.1:{api}{path}") as r:
                    assert r.status == 200 and await r.text() == f"served {method} {path}", (method, path)
    finally:
        await runner.cleanup()
