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
``TOO_SMALL``  even empty, the card has less compute or memory than asked
``IN_USE``     a whole card is asked and containers are on it
``COMPUTE``    not enough compute free
``MEMORY``     not enough memory free
``FULL``       the card already has the most containers it may have
=============  =============================================================
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

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


def is_whole(core_milli: int, memory_ratio_milli: int, memory: int) -> bool:
    """A share that takes its card whole (exclusive): all of its compute, and all of its memory or
    none asked. The same rule for a request (:attr:`DeviceRequest.whole`) and a grant."""
    return core_milli >= WHOLE and (memory_ratio_milli >= WHOLE or memory == 0)


def card_reasons(*, present: Any, healthy: Any, blocked: Any, total_core: Any, total_mem: Any, free_core: Any,
                 free_mem: Any, slots: Any, core: Any, memory: Any, whole: bool, containers: int,
                 max_containers: int) -> Codes:
    """The :class:`Reason` each card (arrays of any one shape) gives to ``containers`` more
    container(s) asking ``core`` thousandths of compute and ``memory`` bytes in all (``memory`` may be
    an array: a ratio of each card's total), ``whole`` when the card is taken exclusively."""
    rules: list[tuple[Reason, Any]] = [
        (Reason.ABSENT, ~np.asarray(present, np.bool_)),
        (Reason.UNHEALTHY, ~np.asarray(healthy, np.bool_)),
        (Reason.HELD, np.asarray(blocked, np.bool_)),
        (Reason.TOO_SMALL, (np.asarray(total_core) < core) | (np.asarray(total_mem) < memory)),
        (Reason.IN_USE, (np.asarray(slots) > 0) & whole),
        (Reason.COMPUTE, np.asarray(free_core) < core),
        (Reason.MEMORY, np.asarray(free_mem) < memory),
        (Reason.FULL, np.asarray(slots) + containers > max_containers),
    ]
    shape = np.broadcast_shapes(*(np.shape(c) for _, c in rules))
    codes = np.zeros(shape, np.int8)
    for reason, failed in reversed(rules):  # the first rule that fails is written last
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
