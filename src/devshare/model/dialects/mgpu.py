"""Volcano mGPU (seed 000): ``vke.volcengine.com/mgpu-core`` (percent of one card, 100 per card)
and ``vke.volcengine.com/mgpu-memory`` (MiB, as a quantity: ``6k`` is 6000 MiB).

Without the pod annotation ``vke.volcengine.com/container-multiple-gpu``, a container asks for a
share of one card (core below 100, with at least MinGPUMemory), or for core / 100 whole cards
(core a multiple of 100, no memory). With it (``"2,1,3"``: one card count per container, in
container order), container i's core and memory are split evenly over that many cards.

Seed 000 contradicts itself: its "2,1,3" example puts container 2 at 33.33% of three cards (core
100 over 3), while its webhook rule says core and memory must be divisible by the count. The rule
wins: a core (or memory) that does not divide evenly by the count is refused, with a message
saying which multiple to use.
"""

from __future__ import annotations

from typing import Any

from devshare.model import names, validation
from devshare.model.dialects.problems import Problems, read_whole
from devshare.model.quantity import MIB
from devshare.model.request import WHOLE, DeviceRequest

NAMES = frozenset({names.MGPU_CORE, names.MGPU_MEMORY})
CARD_PCT = validation.CARD_PCT  # mGPU asks compute in percent of a card


def _whole_cards(n: int) -> DeviceRequest:
    return DeviceRequest(type=names.GPU, count=n, core_milli=WHOLE, memory_ratio_milli=WHOLE)


def _normal(core: int, memory: int | None, where: str, problems: Problems) -> DeviceRequest | None:
    msgs = [
        validation.mgpu_min_memory(core, memory),
        validation.mgpu_full_cards(core),
        validation.mgpu_redundant_memory(core, memory),
    ]
    if any(msgs):
        problems.extend(where, [m for m in msgs if m])
        return None
    if core % CARD_PCT == 0:
        return _whole_cards(core // CARD_PCT)
    assert memory is not None  # mgpu_min_memory refused a share without memory
    return DeviceRequest(type=names.GPU, count=1, core_milli=core * 10, memory=memory * MIB)


def _multiple(core: int, memory: int | None, count: int, where: str, problems: Problems) -> DeviceRequest | None:
    msg = validation.mgpu_count_for_container(count)
    if msg:
        problems.add(where, msg)
        return None
    msgs = [
        validation.mgpu_multi_core_per_card(core, count),
        *validation.mgpu_multi_divisible(core, memory, count),
        validation.mgpu_multi_redundant_memory(core, memory, count),
        validation.mgpu_multi_min_memory(core, memory, count),
    ]
    if any(msgs):
        problems.extend(where, [m for m in msgs if m])
        return None
    if core == CARD_PCT * count:
        return _whole_cards(count)
    assert memory is not None  # mgpu_multi_min_memory refused a share without memory
    return DeviceRequest(type=names.GPU, count=count, core_milli=core * 10 // count, memory=memory * MIB // count)


def parse(
    resources: dict[str, Any], where: str, problems: Problems, count: int | None = None, counts_bad: bool = False
) -> list[DeviceRequest]:
    """The container's request. ``count``: its entry of container-multiple-gpu (None without the
    annotation); ``counts_bad``: the annotation is present but unusable (only rule 1 is checked)."""
    core = read_whole(resources, names.MGPU_CORE, where, problems, "percent")
    memory = read_whole(resources, names.MGPU_MEMORY, where, problems, "MiB")
    if core is None and memory is None:
        return []
    msgs = validation.mgpu_positive(core, memory)
    if msgs:
        problems.extend(where, msgs)
        return []
    if core is None or counts_bad:
        return []
    req = _normal(core, memory, where, problems) if count is None else _multiple(core, memory, count, where, problems)
    return [req] if req is not None else []
