"""Waiting for something to happen, in tests: until a condition holds, polled, with a failsafe.

The failsafe (:data:`FAILSAFE`) only ends a test that would otherwise hang: it is never a measure of
speed. On a loaded machine (CI shares its cores) an event may take seconds to propagate; a test waits
for it as long as it takes (issue 37: no test may depend on getting CPU within a deadline)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

FAILSAFE = 120.0  # seconds
T = TypeVar("T")


async def eventually(cond: Callable[[], Any], *, what: str = "", poll: float = 0.005) -> Any:
    """Poll ``cond`` until it returns something true (returned)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + FAILSAFE
    while True:
        value = cond()
        if value:
            return value
        if loop.time() > end:
            raise AssertionError(f"still waiting after {FAILSAFE:g} s for {what or cond}")
        await asyncio.sleep(poll)


def eventually_in_thread(cond: Callable[[], Any], *, what: str = "", poll: float = 0.02) -> Any:
    """:func:`eventually` for a test that is not a coroutine (it blocks its thread)."""
    end = time.monotonic() + FAILSAFE
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"still waiting after {FAILSAFE:g} s for {what or cond}")
        time.sleep(poll)


async def settled(awaitable: Any) -> Any:
    """Await ``awaitable`` with the failsafe (an event that will come, however slowly)."""
    return await asyncio.wait_for(awaitable, FAILSAFE)
