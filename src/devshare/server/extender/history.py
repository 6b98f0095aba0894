"""A short history of the cluster's GPU allocation and stranded compute, kept in memory for ``/ui``.

Every ``interval`` seconds (:meth:`History.run`) one sample is taken from the state's GPU table: a
few numpy expressions over every card, on the event loop (well under a millisecond per thousand
nodes), never a copy of the state. The last ``size`` samples are kept (a ring): 360 samples every
10 s is the last hour. Lost on restart; Prometheus keeps the long history (the metrics of
:mod:`~devshare.server.extender.metrics`).

The words are those of ``devshare simulate``'s table: *allocated* is the GPU compute given to pods
(assumed or bound) over the compute of every available card (healthy, not held by another device
plugin), *unallocated* the rest, *stranded* the free compute no further share can use
(:mod:`~devshare.server.extender.occupancy`), all in percent of that same total.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from devshare.engine.state import ClusterState
from devshare.engine.stateview import DeviceColumns
from devshare.model import names
from devshare.server.extender.occupancy import stranded_core

log = logging.getLogger(__name__)

INTERVAL = 10.0  # seconds between two samples
SIZE = 360  # samples kept: an hour at INTERVAL


@dataclass(frozen=True)
class Sample:
    at: float  # seconds since the epoch
    gpus: int  # available cards
    allocated_pct: float
    stranded_pct: float

    def json(self) -> dict[str, float]:
        return {"at": self.at, "gpus": self.gpus, "allocatedPct": self.allocated_pct,
                "strandedPct": self.stranded_pct}


def sample_of(state: ClusterState, at: float) -> Sample:
    """The allocation and stranded compute of ``state``'s available GPUs now."""
    table = state.tables.get(names.GPU)
    if table is None or not table.present.any():
        return Sample(at, 0, 0.0, 0.0)
    rows, cols = np.nonzero(table.present)
    cols_ = DeviceColumns(
        type=names.GPU, node=[], id=[], minor=table.minor[rows, cols], total_core=table.total_core[rows, cols],
        used_core=table.used_core[rows, cols], total_mem=table.total_mem[rows, cols],
        used_mem=table.used_mem[rows, cols], containers=table.used_slots[rows, cols],
        healthy=table.healthy[rows, cols], held_outside=table.blocked[rows, cols], memory=True)
    available = cols_.healthy & ~cols_.held_outside
    total = float(cols_.total_core[available].sum())
    if total <= 0:
        return Sample(at, 0, 0.0, 0.0)
    used = float(cols_.used_core[available].sum())
    stranded = float(stranded_core(cols_, state.max_containers).sum()) * 10  # percent -> thousandths
    return Sample(at, int(available.sum()), round(100 * used / total, 2), round(100 * stranded / total, 2))


class History:
    def __init__(self, state: ClusterState, clock: Callable[[], float], *, interval: float = INTERVAL,
                 size: int = SIZE) -> None:
        self.state = state
        self.clock = clock  # wall-clock seconds (time.time)
        self.interval = interval
        self.samples: deque[Sample] = deque(maxlen=size)

    def take(self) -> Sample:
        s = sample_of(self.state, self.clock())
        self.samples.append(s)
        return s

    def json(self) -> dict[str, object]:
        return {"intervalSeconds": self.interval, "size": self.samples.maxlen,
                "samples": [s.json() for s in self.samples]}

    async def run(self, ready: Callable[[], bool]) -> None:
        """Sample every ``interval`` seconds once ``ready()`` (the state synced)."""
        while True:
            try:
                if ready():
                    self.take()
            except Exception:  # never let a sample stop the history
                log.exception("sampling the allocation history failed")
            await asyncio.sleep(self.interval)
