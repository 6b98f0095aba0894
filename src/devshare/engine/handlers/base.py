"""The device-type interface (seed 004), batched over many nodes.

Seed 004's ``FilterNode`` returns one of four codes with a reason; here a handler answers for many
nodes at once, filter and score in one pass (:meth:`DeviceHandler.evaluate`: a code, a score, a
reason and the grants per node). Adding and subtracting a pod's usage (seed 004's ``AddResource`` /
``SubResource``) and release are the same for every type: they are the
:class:`~devshare.engine.table.DeviceTable` accounting done by
:class:`~devshare.engine.state.ClusterState`, so a handler only decides *what fits where*.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
import numpy.typing as npt

from devshare.engine.state import ClusterState
from devshare.engine.table import DeviceTable
from devshare.model.allocation import DeviceGrant
from devshare.model.request import DeviceRequest, PodRequest

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Grants = dict[int, tuple[DeviceGrant, ...]]  # container index -> grants of this type


class Code(IntEnum):
    """Seed 004's filter result codes."""

    SUCCESS = 0
    ERROR = 1  # internal error, unexpected input
    UNSCHEDULABLE = 2  # does not fit now; preemption might help
    UNRESOLVABLE = 3  # UnschedulableAndUnresolvable: preemption would not help


# The codes as plain ints, for the code arrays: with an IntEnum operand numpy first probes the enum's
# class for array hooks (about 6 us per comparison over 5,000 nodes, against 1.5 us).
SUCCESS, ERROR = int(Code.SUCCESS), int(Code.ERROR)
UNSCHEDULABLE, UNRESOLVABLE = int(Code.UNSCHEDULABLE), int(Code.UNRESOLVABLE)


@dataclass(frozen=True)
class Settings:
    """Engine policy knobs (seed 000's predicate.MGPU* arguments and friends)."""

    core_weight: float = 0.5  # w in  w x core-score + (1 - w) x memory-score
    card_binpack: bool = True  # card level: binpack (True) or spread
    node_binpack: bool = True  # node level: binpack (True) or spread
    dfs_budget: int = 2000  # search nodes per pod and node before taking the best found so far
    topology: bool = True  # pick multi-GPU sets by bandwidth where a node publishes a matrix


@dataclass
class Context:
    """Everything a handler needs to judge one pod."""

    state: ClusterState
    pod: PodRequest
    settings: Settings
    policy: Any  # devshare.engine.policies.base.Policy (typed loosely to avoid an import cycle)
    cache: dict[str, Any] = field(default_factory=dict)


@dataclass
class Evaluation:
    """A handler's verdict on ``rows``: a code and a score per row, and lazily, why a row failed
    and which devices the pod gets on a row that passed."""

    rows: Ints
    codes: npt.NDArray[np.int8]
    scores: Floats
    explain: Callable[[int], str]  # index into rows -> reason (failing rows)
    grant: Callable[[int], Grants]  # index into rows -> grants (passing rows)
    # the device columns each row's one asking container gets (rows x count), when the handler says
    # so: what Scheduler.evaluate keeps per node to answer the next pod of the same shape
    columns: Ints | None = None

    def reason(self, i: int) -> str:
        return self.explain(i)


class DeviceHandler(ABC):
    type: str

    @abstractmethod
    def evaluate(self, ctx: Context, rows: Ints) -> Evaluation:
        """Filter and score ``rows`` for ``ctx.pod`` in one pass."""

    def answer_key(self, ctx: Context) -> Hashable | None:
        """What this handler's answer on one node reads besides the pod's shape and the node's own
        arrays (its row version), when the answer may be kept per node: then :meth:`evaluate` sets
        ``columns`` and :meth:`grants_of` gives the same grants from them. None: never kept."""
        return None

    def grants_of(self, ctx: Context, rows: Ints, columns: Ints) -> Callable[[int], Grants]:
        """The grants of each row from the ``columns`` :meth:`evaluate` chose there."""
        raise NotImplementedError


def grant_for(table: DeviceTable, row: int, col: int, req: DeviceRequest) -> DeviceGrant:
    """The grant of one share of ``req`` on device ``col`` of ``row``."""
    total_mem = int(table.total_mem[row, col])
    if req.whole:
        return DeviceGrant(type=table.type, minor=int(table.minor[row, col]), id=table.ids[row][col],
                           core_milli=int(table.total_core[row, col]), memory=total_mem,
                           memory_ratio_milli=1000 if total_mem else 0)
    memory = req.memory_on(total_mem)
    ratio = req.memory_ratio_milli or (memory * 1000 // total_mem if total_mem else 0)
    return DeviceGrant(type=table.type, minor=int(table.minor[row, col]), id=table.ids[row][col],
                       core_milli=req.core_milli, memory=memory, memory_ratio_milli=ratio)
