"""The claim ledger's watermark (:mod:`devshare.server.extender.claims`): a pod resourceVersion at or
after which every binding whose claim left the ledger is visible. A replica decides over the ledger
only once its own watch of pods has reached it."""

from __future__ import annotations

import asyncio
import time

from devshare.server.extender.view import ClusterView

CATCH_UP = 5.0  # seconds a write waits for this replica's watch of pods to reach the ledger's watermark


class Behind(Exception):
    """This replica's watch of pods has not reached the ledger's watermark in time (:data:`CATCH_UP`)."""


def version_number(rv: str | None) -> int | None:
    """A resourceVersion as the number it is (etcd's revision), None when it is not one: ASCII digits
    only (``str.isdigit`` also takes "²", which ``int`` refuses, and "١٢", which it reads as 12)."""
    return int(rv) if rv and rv.isascii() and rv.isdigit() else None


def reached(cluster: ClusterView, want: int) -> bool:
    have = version_number(cluster.watch_version())
    return have is not None and have >= want


async def caught_up(cluster: ClusterView, watermark: str, catch_up: float, where: str) -> None:
    """Return once ``cluster``'s watch of pods has reached ``watermark`` (it has then seen every
    binding whose claim was dropped from the ledger ``where``); :class:`Behind` after ``catch_up`` seconds."""
    want = version_number(watermark)
    if want is None or reached(cluster, want):
        return
    deadline = time.monotonic() + catch_up
    while time.monotonic() < deadline:
        await asyncio.sleep(0.01)
        if reached(cluster, want):
            return
    have_text = cluster.watch_version() or "none"
    raise Behind(f"this replica's watch of pods is at resourceVersion {have_text}, behind the claim ledger's "
                 f"watermark {watermark} ({where}); it binds again once its watch catches up")
