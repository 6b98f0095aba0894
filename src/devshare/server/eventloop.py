"""The event loop devshare's servers run on.

uvloop (libuv, a dependency) runs the same asyncio code as the standard loop, with its transports,
TLS and callbacks in C: measured on this project's 2-core machines it takes 170-207 us of CPU per
plain HTTP request served by aiohttp against 275-280 with asyncio's loop, and 280-311 us per TLS
request sent by aiohttp's client against 373-402 (BENCHMARKS.md, issue 11's eighth stop). The
extender serves two requests and sends one or two per pod, on cores it shares with the control
plane, so that is CPU every other process gets back.

``auto`` takes uvloop where it can be imported and asyncio's loop otherwise (a platform without a
wheel); ``asyncio`` is the way back should a deployment ever need it.

:class:`StallWatch` logs the moments the loop ran nothing for a while: a step that held it (a large
re-list, a long computation) or a process that got no CPU. Every request waited meanwhile, and a
leader's Lease went unrenewed."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

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


STALL_CHECK = 0.5  # seconds between two looks at how late the loop is
STALL_WARN = 1.0  # a look this late (seconds) is logged


class StallWatch:
    """Sleeps ``check`` seconds again and again; a sleep that ends ``warn`` seconds or more after it
    should have means nothing ran on the loop meanwhile: logged (a warning), counted in ``stalls``,
    the time in ``stalled_seconds``. Two wake-ups a second: nothing measurable."""

    def __init__(self, name: str, *, check: float = STALL_CHECK, warn: float = STALL_WARN,
                 clock: Callable[[], float] = time.monotonic, cpu: Callable[[], float] = time.thread_time) -> None:
        self.name = name
        self.check = check
        self.warn = warn
        self.clock = clock
        self.cpu = cpu  # this thread's CPU time: how much of a stall was spent computing
        self.stalls = 0
        self.stalled_seconds = 0.0

    async def run(self) -> None:
        while True:
            start, cpu = self.clock(), self.cpu()
            await asyncio.sleep(self.check)
            late = self.clock() - start - self.check
            if late >= self.warn:
                self.stalls += 1
                self.stalled_seconds += late
                busy = self.cpu() - cpu
                log.warning("%s: the event loop ran nothing for about %.1f s, %.1f s of it on the CPU (%s): every "
                            "request waited, and a Lease went unrenewed, that long", self.name, late, busy,
                            "a step held it" if busy >= late / 2 else "the process got no CPU, or a call blocked")
