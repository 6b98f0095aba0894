"""A least-recently-used cache bounded by bytes, for the extender's caches keyed by request bodies.

The extender caches parsed pods by their JSON and resolved node lists by theirs: the same bodies
come again and again from kube-scheduler. Bounding such caches by entry count bounds nothing (one
entry may be a 20 MB pod); :class:`ByteLRU` takes each entry's size (an estimate of what it keeps
alive: the key's bytes and the value's) and evicts the least recently used entries until the total
fits its budget. An entry larger than ``max_entry`` is not kept at all.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class ByteLRU(Generic[K, V]):
    def __init__(self, budget: int, *, max_entry: int | None = None) -> None:
        self.budget = budget
        self.max_entry = budget // 4 if max_entry is None else max_entry
        self.bytes = 0
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: K) -> V | None:
        hit = self._items.get(key)
        if hit is None:
            return None
        self._items.move_to_end(key)
        return hit[0]

    def put(self, key: K, value: V, size: int) -> None:
        """Keep ``value`` under ``key`` (``size``: bytes it keeps alive, key included)."""
        old = self._items.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        if size > self.max_entry:
            return  # larger than any entry may be: recomputed when asked again
        while self._items and self.bytes + size > self.budget:
            _, (_, dropped) = self._items.popitem(last=False)
            self.bytes -= dropped
        self._items[key] = (value, size)
        self.bytes += size

    def pop_oldest(self) -> None:
        _, (_, dropped) = self._items.popitem(last=False)
        self.bytes -= dropped

    def clear(self) -> None:
        self._items.clear()
        self.bytes = 0
