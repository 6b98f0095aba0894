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
leader's Lease went unrenewed. A thread beside the loop looks at the loop thread's stack while the loop
is late, so the warning names the step that held it."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from types import FrameType

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
STALL_SAMPLE = 0.1  # seconds between two looks at the loop thread's stack while the loop is late
STACK_FRAMES = 8  # the innermost frames of a stack a warning shows


class StallWatch:
    """Sleeps ``check`` seconds again and again; a sleep that ends ``warn`` seconds or more after it
    should have means nothing ran on the loop meanwhile: logged (a warning), counted in ``stalls``,
    the time in ``stalled_seconds``. Two wake-ups a second: nothing measurable.

    While it runs, a daemon thread wakes every ``check`` seconds; when the loop has not woken the watch
    for ``check + sample`` seconds it looks at the loop thread's stack every ``sample`` seconds, and the
    warning names the stack it saw most often: the step that held the loop. (A step in C that keeps the
    GIL the whole time lets no look in; the warning then says no stack was seen.)"""

    def __init__(self, name: str, *, check: float = STALL_CHECK, warn: float = STALL_WARN,
                 sample: float = STALL_SAMPLE, clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] = time.thread_time,
                 stacks: Callable[[], dict[int, FrameType]] = sys._current_frames) -> None:
        self.name = name
        self.check = check
        self.warn = warn
        self.sample = sample
        self.clock = clock
        self.cpu = cpu  # this thread's CPU time: how much of a stall was spent computing
        self.stacks = stacks  # every thread's innermost frame, by thread id
        self.stalls = 0
        self.stalled_seconds = 0.0
        self._woke = clock()  # when the loop last woke the watch (written by the loop, read by the thread)
        # the loop thread's stacks seen while it was late, by their frames' files and functions (the lines
        # within a function differ from one look to the next), and the text of the last one of each
        self._seen: Counter[tuple[tuple[str, str], ...]] = Counter()
        self._text: dict[tuple[tuple[str, str], ...], str] = {}
        self._seen_lock = threading.Lock()  # the thread adds to _seen, the loop reads and clears it

    async def run(self) -> None:
        stop = threading.Event()
        looker = threading.Thread(target=self._look, args=(threading.get_ident(), stop), daemon=True,
                                  name=f"{self.name}-stall-look")
        self._woke = self.clock()
        looker.start()
        try:
            while True:
                start, cpu = self.clock(), self.cpu()
                self._woke = start
                await asyncio.sleep(self.check)
                now = self.clock()
                self._woke = now
                late = now - start - self.check
                with self._seen_lock:
                    if late >= self.warn:
                        self._report(late, self.cpu() - cpu)
                    self._seen.clear()
                    self._text.clear()
        finally:
            stop.set()  # wakes the thread at once: it ends
            looker.join(timeout=self.check)

    def _report(self, late: float, busy: float) -> None:
        self.stalls += 1
        self.stalled_seconds += late
        seen = self._seen.most_common(1)
        if seen:
            stack, count = seen[0]
            where = (f"the step seen in {count} of {sum(self._seen.values())} looks at its stack "
                     f"(innermost last):\n" + self._text[stack])
        else:
            where = "no look at its stack got in (a call in C that kept the GIL, or no CPU for this process)"
        log.warning("%s: the event loop ran nothing for about %.1f s, %.1f s of it on the CPU (%s): every "
                    "request waited, and a Lease went unrenewed, that long; %s", self.name, late, busy,
                    "a step held it" if busy >= late / 2 else "the process got no CPU, or a call blocked", where)

    def _look(self, loop_thread: int, stop: threading.Event) -> None:
        """The thread: while the loop is late, counts the loop thread's stacks (its innermost frames)."""
        while not stop.wait(self.sample if self.clock() - self._woke > self.check + self.sample else self.check):
            if self.clock() - self._woke <= self.check + self.sample:
                continue
            frame = self.stacks().get(loop_thread)
            if frame is not None:
                frames = traceback.extract_stack(frame)[-STACK_FRAMES:]
                key = tuple((f.filename, f.name) for f in frames)
                text = "".join(traceback.format_list(frames))
                with self._seen_lock:
                    self._seen[key] += 1
                    self._text[key] = text
