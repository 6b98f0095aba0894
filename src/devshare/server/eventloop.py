"""The event loop devshare's servers run on.

uvloop (libuv, a dependency) runs the same asyncio code as the standard loop, with its transports,
TLS and callbacks in C: measured on this project's 2-core machines it takes 170-207 us of CPU per
plain HTTP request served by aiohttp against 275-280 with asyncio's loop, and 280-311 us per TLS
request sent by aiohttp's client against 373-402 (BENCHMARKS.md, issue 11's eighth stop). The
extender serves two requests and sends one or two per pod, on cores it shares with the control
plane, so that is CPU every other process gets back.

``auto`` takes uvloop where it can be imported and asyncio's loop otherwise (a platform without a
wheel); ``asyncio`` is the way back should a deployment ever need it."""

from __future__ import annotations

import asyncio

EVENT_LOOPS = ("auto", "uvloop", "asyncio")


def new_event_loop(kind: str = "auto") -> asyncio.AbstractEventLoop:
    """A new event loop of ``kind`` (one of :data:`EVENT_LOOPS`). Raises ValueError, saying what to
    do, for an unknown kind or for ``uvloop`` where it cannot be imported."""
    if kind not in EVENT_LOOPS:
        raise ValueError(f"unknown event loop {kind!r}: use one of {', '.join(EVENT_LOOPS)}")
    if kind != "asyncio":
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise ValueError("the uvloop event loop is asked for but the uvloop package is not installed: "
                                 "install it (pip install uvloop) or use the asyncio loop") from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()
