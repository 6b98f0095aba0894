"""Where and how the extender listens: the address check of its API port (:func:`listen_check`),
the read-only port's paths (:func:`read_only_on`), and the start-up line that says both
(:func:`listening_line`)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any

from aiohttp import web

READ_ONLY = ("/metrics", "/healthz", "/readyz", "/inspect", "/ui")


def read_only_on(port: int) -> Callable[..., Any]:
    """Middleware: requests that came in on ``port`` may only GET the read-only paths."""

    @web.middleware
    async def guard(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
        if sockname and sockname[1] == port:
            allowed = request.method in ("GET", "HEAD") and (
                request.path in READ_ONLY or request.path.startswith("/ui/"))
            if not allowed:
                return web.Response(status=404, text=f"not served on the read-only port {port}: "
                                    f"{', '.join(READ_ONLY)} only\n")
        response: web.StreamResponse = await handler(request)
        return response

    return guard


def listening_line(host: str, port: int, *, tls: bool, client_auth: bool,
                   read_only: tuple[str, int] | None) -> str:
    """The start-up line: where kube-scheduler's requests and the read-only port are served, and how."""
    scheme = "https" if tls else "http"
    how = "TLS, client certificate required" if client_auth else "TLS" if tls else "plain HTTP"
    line = f"devshare extender listening: kube-scheduler's requests on {scheme}://{host}:{port} ({how})"
    if read_only is None:
        return line + "; no read-only port (--metrics-port 0)"
    return (line + f"; read-only port ({', '.join(READ_ONLY)}) on {scheme}://{read_only[0]}:{read_only[1]} "
            f"({'TLS' if tls else 'plain HTTP'})")


def is_loopback(host: str) -> bool:
    """True for an address only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def listen_check(host: str, *, tls: bool, insecure: bool) -> str | None:
    """Whether the extender may listen on ``host``: raises ValueError on a non-loopback address
    without TLS and client certificates (whoever reaches /bind can bind any pod anywhere), unless
    ``insecure``; then returns the warning to log."""
    if tls or is_loopback(host):
        return None
    if not insecure:
        raise ValueError(
            f"refusing to listen on {host} without TLS: anyone who reaches it could bind pods. Give "
            "--tls-cert, --tls-key and --tls-client-ca (the CA of kube-scheduler's client certificate, "
            "its extender tlsConfig certFile/keyFile), listen on 127.0.0.1 beside kube-scheduler, or "
            "pass --insecure to accept the risk"
        )
    return (f"INSECURE: listening on {host} in plain HTTP without client authentication (--insecure): "
            "anyone who reaches this port can filter, bind and preempt pods")
