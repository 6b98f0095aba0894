"""A collector of problems found while reading a pod: the parser keeps going after the first one,
so that validation reports all of them, and :func:`devshare.model.pod.parse_pod` raises them."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from devshare.model.errors import InvalidInput, InvalidRequest
from devshare.model.quantity import parse_quantity, shown
from devshare.model.request import MAX_DEVICE_MEMORY, MAX_DEVICES


class Problems:
    """Problems found so far, each an :class:`InvalidRequest` naming where it is."""

    def __init__(self) -> None:
        self.items: list[InvalidRequest] = []

    def add(self, where: str, message: str) -> None:
        self.items.append(InvalidRequest(message, field=where))

    def extend(self, where: str, messages: list[str]) -> None:
        for m in messages:
            self.add(where, m)

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def messages(self) -> list[str]:
        return [str(p) for p in self.items]

    def raise_if_any(self) -> None:
        """Raise the problem found (all of them, in one error, when there are several)."""
        if not self.items:
            return
        if len(self.items) == 1:
            raise self.items[0]
        raise InvalidRequest(f"{len(self.items)} problems: " + "; ".join(self.messages()))


# the largest value of a dimension by its unit (see request.MAX_DEVICES)
MAXIMUM = {
    "GPUs": (MAX_DEVICES, f"{MAX_DEVICES} devices"),
    "percent": (MAX_DEVICES * 100, f"{MAX_DEVICES * 100} ({MAX_DEVICES} whole devices)"),
    "bytes": (MAX_DEVICE_MEMORY, "1Pi (1 PiB)"),
    "MiB": (MAX_DEVICE_MEMORY // 2**20, f"{MAX_DEVICE_MEMORY // 2**20} (1 PiB)"),
}


def read_whole(resources: dict[str, Any], name: str, where: str, problems: Problems, unit: str) -> int | None:
    """The whole-number value of resource ``name`` (None when absent or unreadable; a problem is
    recorded when unreadable or above the unit's maximum). ``unit`` names what the number counts,
    for the message."""
    if name not in resources:
        return None
    value = resources[name]
    try:
        q: Fraction = parse_quantity(value)
    except InvalidInput as e:
        problems.add(where, f"{name}: {e.message}")
        return None
    if q.denominator != 1:
        problems.add(where, f"{name} is {float(q):g}; it must be a whole number of {unit}")
        return None
    top = MAXIMUM.get(unit)
    if top is not None and q > top[0]:
        problems.add(where, f"{name} is {shown(value)}, far beyond any device: it must be at most {top[1]}")
        return None
    return int(q)
