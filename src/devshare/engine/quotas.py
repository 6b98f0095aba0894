"""Per-namespace GPU quotas: the GPU compute and memory a namespace's pods may hold at once, summed
across dialects (``koordinator.sh/gpu-core: 30``, ``vke.volcengine.com/mgpu-core: 30`` and a third of
``nvidia.com/gpu: 1`` all count as GPU compute; memory asked as a ratio counts as the bytes it
becomes on the card it takes, a whole card as all of that card's memory).

What a namespace holds is :attr:`ClusterState.namespace_gpu` (every assumed and bound record, kept in
step by the state). :class:`Quotas` judges a pod before and after its device handlers: compute and
memory asked in bytes do not depend on the node (refused everywhere at once); memory asked as a
ratio or as whole cards depends on each node's cards (the largest and smallest card bound it; a node
in between gets its exact allocation). A refusal is UNRESOLVABLE (freeing devices on other nodes
does not help) and reads ``namespace team-a: gpu core quota 200% used 180%, asks 30%``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from devshare.engine.state import ClusterState
from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.quantity import human_bytes
from devshare.model.request import PodRequest

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Quota:
    """One namespace's limits (None: no limit on that dimension)."""

    core_milli: int | None = None  # thousandths of one GPU's compute (gpuCore 200 = 2000)
    memory: int | None = None  # bytes of GPU memory


@dataclass(frozen=True)
class Ask:
    """What a pod asks of GPUs: compute (thousandths), memory in bytes whatever the card, and the
    thousandths of a card's memory it takes on top (ratios and whole cards)."""

    core_milli: int
    memory: int
    card_milli: int

    @staticmethod
    def of(pod: PodRequest) -> Ask:
        core = memory = card = 0
        for c in pod.containers:
            for d in c.devices:
                if d.type != names.GPU:
                    continue
                core += d.core_milli * d.count
                if d.whole:
                    card += 1000 * d.count
                elif d.memory_ratio_milli:
                    card += d.memory_ratio_milli * d.count
                else:
                    memory += d.memory * d.count
        return Ask(core, memory, card)


def _pct(milli: int) -> str:
    return f"{milli / 10:g}%"


class Quotas:
    """The configured quotas, by namespace."""

    def __init__(self, limits: Mapping[str, Quota]) -> None:
        self.limits = dict(limits)

    def __bool__(self) -> bool:
        return bool(self.limits)

    def _used(self, state: ClusterState, namespace: str) -> tuple[int, int]:
        used = state.namespace_gpu.get(namespace)
        return (used[0], used[1]) if used else (0, 0)

    def refuse_everywhere(self, state: ClusterState, pod: PodRequest) -> str | None:
        """Why ``pod`` exceeds its namespace's quota on any node (compute, memory asked in bytes)."""
        quota = self.limits.get(pod.namespace)
        if quota is None:
            return None
        ask = Ask.of(pod)
        if not ask.core_milli and not ask.memory and not ask.card_milli:
            return None
        core, memory = self._used(state, pod.namespace)
        if quota.core_milli is not None and ask.core_milli and core + ask.core_milli > quota.core_milli:
            return (f"namespace {pod.namespace}: gpu core quota {_pct(quota.core_milli)} used {_pct(core)}, "
                    f"asks {_pct(ask.core_milli)}")
        if quota.memory is not None and ask.memory and memory + ask.memory > quota.memory:
            return self._memory(pod.namespace, quota.memory, memory, ask.memory)
        return None

    @staticmethod
    def _memory(namespace: str, limit: int, used: int, asked: int, detail: str = "") -> str:
        return (f"namespace {namespace}: gpu memory quota {human_bytes(limit)} used {human_bytes(used)}, "
                f"asks {human_bytes(asked)}{detail}")

    def refuse_per_row(self, state: ClusterState, pod: PodRequest, rows: Ints, passed: Ints,
                       allocation: Callable[[int], PodAllocation]) -> dict[int, str]:
        """Among ``passed`` (indexes into ``rows`` the handlers passed), those where the memory the
        pod's ratios and whole cards become on that node's cards exceeds the quota, with the reason."""
        quota = self.limits.get(pod.namespace)
        if quota is None or quota.memory is None or not passed.size:
            return {}
        ask = Ask.of(pod)
        if not ask.card_milli:
            return {}
        table = state.tables.get(names.GPU)
        if table is None:
            return {}
        _, used = self._used(state, pod.namespace)
        room = quota.memory - used - ask.memory
        r = rows[passed]
        present = table.present[r]
        biggest = np.where(present, table.total_mem[r], 0).max(axis=1)
        smallest = np.where(present, table.total_mem[r], np.iinfo(np.int64).max).min(axis=1)
        low = smallest * ask.card_milli // 1000
        high = biggest * ask.card_milli // 1000
        out: dict[int, str] = {}
        for k in np.flatnonzero(high > room).tolist():
            i = int(passed[k])
            if low[k] > room:
                asked = int(low[k])
            else:  # cards of several sizes: what this node's allocation takes
                alloc = allocation(i)
                asked = sum(g.memory for _, g in alloc.grants() if g.type == names.GPU) - ask.memory
                if asked <= room:
                    continue
            out[i] = self._memory(pod.namespace, quota.memory, used, ask.memory + asked,
                                  f" ({_pct(ask.card_milli)} of a card's memory on this node's cards)")
        return out
