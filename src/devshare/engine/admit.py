"""Does this card take this share? The one predicate, with a reason code per card.

The filter's mask (:func:`devshare.engine.fit.card_fits`, its hot-path form over every node at
once), the filter's per-card messages (:func:`devshare.engine.handlers.share.describe_cards`) and
reserve's check (:meth:`devshare.engine.state.ClusterState.why_not`) all derive from
:func:`card_reasons`; a property test holds them to it, reason for reason.

Rules, first failing wins (so a card gets one reason, the most basic one):

=============  =============================================================
``ABSENT``     no such device on the node
``UNHEALTHY``  the device reports unhealthy
``HELD``       another device plugin holds it
``EXCLUDED``   the pod's GPU selection leaves it out (HAMi's ``nvidia.com/use-gpuuuid``, ...)
``TOO_SMALL``  even empty, the card has less compute or memory than asked
``IN_USE``     a whole card is asked and containers are on it
``COMPUTE``    not enough compute free
``MEMORY``     not enough memory free
``FULL``       the card already has the most containers it may have
=============  =============================================================
"""

from __future__ import annotations

from collections.abc import Callable
from enum import IntEnum
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from devshare.model.quantity import human_bytes
from devshare.model.request import WHOLE

Ints = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]
Codes = npt.NDArray[np.int8]


class Reason(IntEnum):
    FITS = 0
    ABSENT = 1
    UNHEALTHY = 2
    HELD = 3
    TOO_SMALL = 4
    IN_USE = 5
    COMPUTE = 6
    MEMORY = 7
    FULL = 8
    EXCLUDED = 9


def is_whole(core_milli: int, memory_ratio_milli: int, memory: int) -> bool:
    """A share that takes its card whole (exclusive): all of its compute, and all of its memory or
    none asked. The same rule for a request (:attr:`DeviceRequest.whole`) and a grant."""
    return core_milli >= WHOLE and (memory_ratio_milli >= WHOLE or memory == 0)


class Card(NamedTuple):
    """One card, or arrays of cards of any one shape (the rules below read both)."""

    present: Any
    healthy: Any
    blocked: Any
    total_core: Any
    total_mem: Any
    free_core: Any
    free_mem: Any
    slots: Any
    excluded: Any = False  # the pod may not take it (its GPU selection annotations)


class Ask(NamedTuple):
    """What is asked of each card: ``containers`` more container(s) wanting ``core`` thousandths of
    compute and ``memory`` bytes in all (an array when a ratio of each card's total), the card taken
    exclusively when ``whole``."""

    core: Any
    memory: Any
    whole: bool
    containers: int
    max_containers: int


# The predicate, once: each rule is true where the card fails it. Written with comparisons, ``&`` and
# ``|`` only, so one rule reads Python scalars (reserve, one card at a time) and numpy arrays (the
# filter, every card of every candidate at once) alike.
RULES: tuple[tuple[Reason, Callable[[Card, Ask], Any]], ...] = (
    (Reason.ABSENT, lambda c, a: c.present == 0),
    (Reason.UNHEALTHY, lambda c, a: c.healthy == 0),
    (Reason.HELD, lambda c, a: c.blocked != 0),
    (Reason.EXCLUDED, lambda c, a: c.excluded != 0),
    (Reason.TOO_SMALL, lambda c, a: (c.total_core < a.core) | (c.total_mem < a.memory)),
    (Reason.IN_USE, lambda c, a: (c.slots > 0) & a.whole),
    (Reason.COMPUTE, lambda c, a: c.free_core < a.core),
    (Reason.MEMORY, lambda c, a: c.free_mem < a.memory),
    (Reason.FULL, lambda c, a: c.slots + a.containers > a.max_containers),
)


def card_reason(card: Card, ask: Ask) -> Reason:
    """The :class:`Reason` one card (Python scalars) gives to ``ask``: the first rule it fails."""
    for reason, failed in RULES:
        if failed(card, ask):
            return reason
    return Reason.FITS


def card_reasons(card: Card, ask: Ask) -> Codes:
    """:func:`card_reason` of every card of ``card`` (arrays of any one shape), as an int8 array."""
    fails = [(reason, np.asarray(failed(card, ask), np.bool_)) for reason, failed in RULES]
    shape = np.broadcast_shapes(*(f.shape for _, f in fails))
    codes = np.zeros(shape, np.int8)
    for reason, failed in reversed(fails):  # the first rule that fails is written last
        codes[np.broadcast_to(failed, shape)] = reason
    return codes


def describe(reason: int, name: str, *, total_core: int, total_mem: int, free_core: int, free_mem: int,
             slots: int, core: int, memory: int, max_containers: int) -> str:
    """The message of one card's reason, ``name`` the card ("gpu 3")."""
    r = Reason(reason)
    if r is Reason.ABSENT:
        return f"{name}: no such device on the node"
    if r is Reason.UNHEALTHY:
        return f"{name}: unhealthy"
    if r is Reason.HELD:
        return f"{name}: held by another device plugin"
    if r is Reason.EXCLUDED:
        return f"{name}: left out by the pod's GPU selection"
    if r is Reason.TOO_SMALL:
        return f"{name}: {human_bytes(total_mem)} and {_pct(total_core)} compute in all, too small"
    if r is Reason.IN_USE:
        return f"{name}: in use, a whole device asked"
    if r is Reason.COMPUTE:
        return f"{name}: {_pct(free_core)} compute free, {_pct(core)} asked"
    if r is Reason.MEMORY:
        return f"{name}: {human_bytes(free_mem)} free, {human_bytes(memory)} asked"
    if r is Reason.FULL:
        return f"{name}: {slots} containers already, at most {max_containers}"
    return ""


def _pct(milli: int) -> str:
    return f"{milli / 10:g}%"
