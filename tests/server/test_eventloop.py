"""devshare.server.eventloop: the servers' event loop."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time

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


async def test_a_loop_held_for_a_while_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    watch = StallWatch("test", check=0.01, warn=0.1)
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.sleep(0.05)
        assert watch.stalls == 0  # a loop that runs freely is not reported
        time.sleep(0.3)  # holds the loop: nothing runs meanwhile
        await asyncio.sleep(0.05)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert watch.stalls == 1 and watch.stalled_seconds >= 0.2
    assert "the event loop ran nothing for about" in caplog.text
    assert "the process got no CPU, or a call blocked" in caplog.text  # time.sleep: off the CPU


def _hold_the_loop_on_the_cpu(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sum(range(1000))


async def test_a_stall_names_the_step_that_held_the_loop(caplog: pytest.LogCaptureFixture) -> None:
    watch = StallWatch("test", check=0.02, warn=0.2, sample=0.02)
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.sleep(0.1)
        _hold_the_loop_on_the_cpu(0.5)
        await asyncio.sleep(0.1)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert watch.stalls == 1
    assert "a step held it" in caplog.text
    assert "looks at its stack" in caplog.text and "_hold_the_loop_on_the_cpu" in caplog.text
    seen, looks = map(int, re.search(r"seen in (\d+) of (\d+) looks", caplog.text).groups())  # type: ignore[union-attr]
    assert looks >= 3 and seen >= looks - 1  # looks on either line of the holding loop count as one step
    assert not any(t.name == "test-stall-look" for t in threading.enumerate())  # the thread stopped with the watch
