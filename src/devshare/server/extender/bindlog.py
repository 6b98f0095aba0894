"""Successful binds in the log, cheaply (issue 40: they were never logged).

- one DEBUG line per pod bound: ``bound pod team-a/train to node gpu-3: main: gpu 0 (30% compute,
  6 GiB)``, formatted only when DEBUG is on for this logger (at INFO a bind costs two appends);
- one INFO line every ``interval`` seconds (``--bind-summary-interval``, asked by the extender's
  upkeep): ``binds in the last 60 s: 118 bound, 3 refused; bind latency p50 4.2 ms, max 35.1 ms``,
  and nothing while there were no binds.

The latencies kept between two summaries are bounded (:data:`KEPT`): past that many binds the
median is of the first ones.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from devshare.model.allocation import PodAllocation
from devshare.model.quantity import human_bytes

log = logging.getLogger("devshare.server.extender.binding")

KEPT = 100_000  # latencies kept between two summaries (800 KB)


def devices_of(alloc: PodAllocation) -> str:
    """``main: gpu 0 (30% compute, 6 GiB); sidecar: rdma 1 (50%)``: what each container got."""
    parts = []
    for c in alloc.containers:
        grants = []
        for g in c.devices:
            what = [f"{g.core_milli / 10:g}% compute" if g.type == "gpu" else f"{g.core_milli / 10:g}%"]
            if g.memory:
                what.append(human_bytes(g.memory))
            grants.append(f"{g.type} {g.minor} ({', '.join(what)})")
        if grants:
            parts.append(f"{c.name}: {', '.join(grants)}")
    return "; ".join(parts) or "no device"


class BindLog:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock  # when summaries are due
        self.since = clock()
        self.bound = 0
        self.refused = 0
        self.latencies: list[float] = []

    def pod_bound(self, key: str, node: str, alloc: PodAllocation) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug("bound pod %s to node %s: %s", key, node, devices_of(alloc))

    def done(self, ok: bool, seconds: float) -> None:
        """One /bind answered: bound (``ok``) or refused, after ``seconds``."""
        if ok:
            self.bound += 1
        else:
            self.refused += 1
        if len(self.latencies) < KEPT:
            self.latencies.append(seconds)

    def tick(self, interval: float) -> None:
        """Log the summary when ``interval`` seconds have passed since the last (0: never)."""
        now = self.clock()
        if interval <= 0 or now - self.since < interval:
            return
        took, self.since = now - self.since, now
        if self.latencies:
            ordered = sorted(self.latencies)
            log.info("binds in the last %.0f s: %d bound, %d refused; bind latency p50 %.1f ms, max %.1f ms",
                     took, self.bound, self.refused, ordered[(len(ordered) - 1) // 2] * 1000, ordered[-1] * 1000)
        self.bound = self.refused = 0
        self.latencies = []
