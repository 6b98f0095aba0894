"""devshare.server.eventloop: the servers' event loop."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import threading
from types import FrameType
from typing import Any

import pytest
import uvloop

from devshare.server.eventloop import EVENT_LOOPS, StallWatch, new_event_loop
from support.imports import without_package


def _run(loop: asyncio.AbstractEventLoop) -> int:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    try:
        return loop.run_until_complete(answer())
    finally:
        loop.close()


def test_auto_and_uvloop_give_uvloop_and_asyncio_the_standard_loop() -> None:
    for kind in ("auto", "uvloop"):
        loop = new_event_loop(kind)
        assert isinstance(loop, uvloop.Loop)
        assert _run(loop) == 42
    loop = new_event_loop("asyncio")
    assert not isinstance(loop, uvloop.Loop) and isinstance(loop, asyncio.AbstractEventLoop)
    assert _run(loop) == 42


def test_without_uvloop_auto_falls_back_and_uvloop_says_how_to_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    without_package(monkeypatch, "uvloop")
    loop = new_event_loop("auto")
    assert not isinstance(loop, uvloop.Loop)
    loop.close()
    with pytest.raises(ValueError, match="pip install uvloop"):
        new_event_loop("uvloop")


def test_an_unknown_kind_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown event loop 'trio'") as e:
        new_event_loop("trio")
    assert all(k in str(e.value) for k in EVENT_LOOPS)


class Clock:
    """A clock the test moves: the watch's ``clock`` (wall) or ``cpu`` (this thread's CPU time)."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _hold_the_loop_on_the_cpu() -> FrameType:
    """The frame a look at the loop thread's stack finds while this "holds" the loop."""
    return sys._getframe()


class Stacks:
    """What a look at the threads' stacks finds (``frame`` for the loop thread, nothing for the others).
    ``looked`` is set at the second look: by then the first is recorded (the look thread is sequential)."""

    def __init__(self, frame: FrameType | None) -> None:
        self.frame = frame
        self.loop_thread = threading.get_ident()
        self.looks = 0
        self.looked = threading.Event()

    def __call__(self) -> dict[int, FrameType]:
        self.looks += 1
        if self.looks >= 2:
            self.looked.set()
        return {self.loop_thread: self.frame} if self.frame is not None else {}


async def _stall(clock: Clock, cpu: Clock, stacks: Stacks, *, late: float, busy: float) -> None:
    """The loop "runs nothing" for ``late`` seconds, ``busy`` of them on its CPU: the watch's clocks jump,
    and the loop thread waits (off the loop: nothing else runs) until the look thread has looked at its
    stack once. Real time plays no part: the watch's clocks are the test's."""
    await asyncio.sleep(0.01)  # the watch is asleep in its check
    clock.now += late
    cpu.now += busy
    assert stacks.looked.wait(60), "the look thread never looked"  # a failsafe, not a deadline
    for _ in range(100):  # the watch wakes and reports on its next round
        await asyncio.sleep(0.001)


@contextlib.asynccontextmanager
async def running(watch: StallWatch) -> Any:
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.sleep(0)
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        for t in threading.enumerate():
            if t.name == f"{watch.name}-stall-look":
                t.join(60)


async def test_a_loop_that_runs_freely_is_not_reported() -> None:
    clock, cpu, stacks = Clock(), Clock(), Stacks(None)
    watch = StallWatch("free", check=0.001, warn=0.2, sample=0.001, clock=clock, cpu=cpu, stacks=stacks)
    async with running(watch):
        for _ in range(20):
            clock.now += 0.001
            await asyncio.sleep(0.001)
    assert watch.stalls == 0 and not stacks.looked.is_set()


async def test_a_blocked_loop_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    clock, cpu, stacks = Clock(), Clock(), Stacks(None)
    watch = StallWatch("blocked", check=0.001, warn=0.2, sample=0.001, clock=clock, cpu=cpu, stacks=stacks)
    async with running(watch):
        await _stall(clock, cpu, stacks, late=0.5, busy=0.0)  # off the CPU: a blocking call, or no CPU at all
    assert watch.stalls == 1 and watch.stalled_seconds == pytest.approx(0.5, abs=0.01)
    assert "the event loop ran nothing for about 0.5 s, 0.0 s of it on the CPU" in caplog.text
    assert "the process got no CPU, or a call blocked" in caplog.text
    assert "no look at its stack got in" in caplog.text


async def test_a_stall_names_the_step_that_held_the_loop(caplog: pytest.LogCaptureFixture) -> None:
    clock, cpu, stacks = Clock(), Clock(), Stacks(_hold_the_loop_on_the_cpu())
    watch = StallWatch("held", check=0.001, warn=0.2, sample=0.001, clock=clock, cpu=cpu, stacks=stacks)
    async with running(watch):
        await _stall(clock, cpu, stacks, late=2.0, busy=1.9)
    assert watch.stalls == 1
    assert "a step held it" in caplog.text
    assert "looks at its stack" in caplog.text and "_hold_the_loop_on_the_cpu" in caplog.text
    seen, looks = map(int, re.search(r"seen in (\d+) of (\d+) looks", caplog.text).groups())  # type: ignore[union-attr]
    assert looks >= 1 and seen == looks  # every look found the same step
    assert not any(t.name == "held-stall-look" for t in threading.enumerate())  # the thread stopped with the watch
