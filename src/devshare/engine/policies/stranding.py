"""Free cards a node can no longer fill: stranded next to too little CPU or memory.

A card is only used if a pod comes that fits beside it: a node with two free cards and 1.6 cores or
3 GiB of memory left keeps both cards empty to the end, while one-GPU pods are turned away elsewhere.
On the default openb trace that was 16 cards on seed 42 (0.26% of the cluster): an 8-core pod on an
8-core two-GPU node, four one-GPU pods of 88 to 123 GiB on a 384 GiB eight-GPU node.

:class:`Stranding` learns what one card needs beside it from the GPU pods seen so far: a pod of ``k``
cards with a share ``g`` (milli) each and ``c`` CPU, ``m`` memory needs ``c / (k g / 1000)`` CPU and
``m / (k g / 1000)`` memory per card (two 470 shares fill a card and ask twice a 470's CPU). Its needs
are weighed by the GPU they ask (the cards they would fill), the ``TOP`` heaviest kept. A node with
``n`` free cards, CPU ``c`` and memory ``m`` left is expected to strand

    1000 x sum_t w_t max(0, n - min(c / cpu_t, m / mem_t))

milli-GPU: as many cards as pods of the need ``t`` would find no CPU or memory for, over the needs'
weights ``w_t``. The policy adds what a placement removes of this (before minus after) to its score,
times its ``strand`` weight.
"""

from __future__ import annotations

import numpy as np

from devshare.engine.policies.frag import Floats
from devshare.model.request import WHOLE, PodRequest

TOP = 40  # per-card needs kept (the heaviest by GPU asked); the default trace has about 60


class Stranding:
    """Per-card CPU and memory needs of the GPU pods seen, and the free GPU stranded by too little of them."""

    def __init__(self) -> None:
        self.needs: dict[tuple[float, float], float] = {}  # (CPU, memory) per card -> milli-GPU asked
        self.cpu = np.ones(1, np.float64)
        self.mem = np.ones(1, np.float64)
        self.weight = np.zeros(1, np.float64)

    def observe(self, pod: PodRequest, count: int, milli: int) -> None:
        """A pod asking ``count`` cards of ``milli`` each arrived (nothing for a pod asking no GPU)."""
        if count <= 0 or milli <= 0:
            return
        cards = count * min(milli, WHOLE) / WHOLE
        key = (pod.cpu_milli / cards, pod.memory_bytes / cards)
        self.needs[key] = self.needs.get(key, 0.0) + count * milli

    def rebuild(self) -> None:
        """The table :meth:`stranded` reads: the ``TOP`` heaviest needs, weights summing to 1."""
        kept = sorted(self.needs.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP]
        if not kept:
            self.cpu, self.mem, self.weight = np.ones(1), np.ones(1), np.zeros(1)
            return
        self.cpu = np.array([max(k[0], 1.0) for k, _ in kept], np.float64)
        self.mem = np.array([max(k[1], 1.0) for k, _ in kept], np.float64)
        w = np.array([v for _, v in kept], np.float64)
        self.weight = w / w.sum()

    def fill(self, cpu: Floats, mem: Floats) -> Floats:
        """``[..., K]``: how many pods of each need the CPU and memory left would take (at least 0)."""
        f = np.minimum(np.multiply.outer(cpu, 1.0 / self.cpu), np.multiply.outer(mem, 1.0 / self.mem))
        return np.maximum(f, 0.0, out=f)

    def stranded(self, free_cards: Floats, cpu: Floats, mem: Floats, fill: Floats | None = None) -> Floats:
        """Milli-GPU expected to stay unused for lack of CPU or memory (module doc), per element of
        ``free_cards``, ``cpu`` and ``mem`` (one shape; memory in bytes, a huge value for untracked);
        ``fill``: :meth:`fill` of ``cpu`` and ``mem`` when already known."""
        f = self.fill(cpu, mem) if fill is None else fill
        left = free_cards[..., None] - f
        np.maximum(left, 0.0, out=left)
        return np.asarray(WHOLE * (left @ self.weight), np.float64)
