"""Every cache of the engine, one owner and one invalidation rule.

The rule: an answer is kept with the versions of what it was computed from, and used only while
they still hold:

- derived from nodes and devices alone (device counts, GPU model codes, topology solvers):
  valid while ``ClusterState.layout`` holds (:meth:`EngineCaches.per_layout`);
- one node's answer for one pod shape (the whole verdict there: code, score and devices
  (``Scheduler.evaluate``); a policy's score and devices there; the node's "why not" text): kept
  per node with that node's ``row_version`` and valid while it holds, in arrays over node indexes,
  under a key that says everything else the answer read (:meth:`EngineCaches.per_node`). For a
  policy's answers the policy declares that key (:func:`policy_key`): what of the pod and of its
  own model it reads.

Bounded caches drop their least recently used entry, never everything at once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, Protocol, TypeVar

import msgspec

from devshare.model.request import DeviceRequest, PodRequest

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
T = TypeVar("T")
A = TypeVar("A", bound=tuple[Any, ...])  # per-node arrays (numpy), the first one over node indexes

NODE_ANSWER_KEYS = 64  # pod shapes (and policies) whose per-node answers are kept, per kind


class LRU(Generic[K, V]):
    """The one least-recently-used cache of devshare: a mapping bounded by ``maxsize``, the total of its
    entries' sizes (cachetools' ``LRUCache`` rule: each entry's ``size`` when put, else ``getsizeof(value)``,
    else 1), and by ``maxitems`` entries when given. Putting an entry evicts the least recently used ones
    until it fits; an entry larger than ``max_entry`` (default: ``maxsize``) is not kept at all (it would
    empty the cache: it is made again when asked). Reading an entry makes it the most recently used.

    Bounded by bytes, it holds what request bodies key (parsed pods, node lists: one entry may be a
    20 MB pod); by count, the engine's per-node answers and the extender's recent filters."""

    def __init__(self, maxsize: int, *, getsizeof: Callable[[V], int] | None = None, max_entry: int | None = None,
                 maxitems: int | None = None) -> None:
        self.maxsize = maxsize
        self.getsizeof = getsizeof
        self.max_entry = maxsize if max_entry is None else max_entry
        self.maxitems = maxitems
        self.currsize = 0
        self._d: OrderedDict[K, tuple[V, int]] = OrderedDict()

    def get(self, key: K, default: Any = None) -> Any:
        """The value under ``key`` (now the most recently used), else ``default``."""
        try:
            v = self._d[key]
        except KeyError:
            return default
        self._d.move_to_end(key)
        return v[0]

    def put(self, key: K, value: V, size: int | None = None) -> V:
        """Keep ``value`` under ``key`` (``size``: what it keeps alive, key included, in the cache's unit)."""
        self.pop(key)
        n = size if size is not None else self.getsizeof(value) if self.getsizeof is not None else 1
        if n > self.max_entry:
            return value
        while self._d and (self.currsize + n > self.maxsize
                           or (self.maxitems is not None and len(self._d) >= self.maxitems)):
            _, (_, dropped) = self._d.popitem(last=False)
            self.currsize -= dropped
        self._d[key] = (value, n)
        self.currsize += n
        return value

    def pop(self, key: K, default: Any = None) -> Any:
        hit = self._d.pop(key, None)
        if hit is None:
            return default
        self.currsize -= hit[1]
        return hit[0]

    def clear(self) -> None:
        self._d.clear()
        self.currsize = 0

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: object) -> bool:
        return key in self._d


def policy_key(policy: Any, pod: PodRequest, request: DeviceRequest) -> Hashable | None:
    """The key of a policy's answer on one node: the policy (by identity) and what it declares, or None
    when its answers are not kept.

    A policy declares it with ``cache_key(pod, request)``: what of the pod and of its own learned
    model its choice on one node reads (the node's own arrays are covered by its row version). A
    policy that only says ``row_local = True`` gets the safe key: the whole pod shape and its
    ``model_version``. Anything else is never cached."""
    declared = getattr(policy, "cache_key", None)
    if declared is not None:
        key: Hashable | None = declared(pod, request)
        return None if key is None else (Identity(policy), key)
    if getattr(policy, "row_local", False):
        anonymous = msgspec.structs.replace(pod, namespace="", name="", uid="")  # priority kept: it may read it
        return (Identity(policy), (anonymous, request, getattr(policy, "model_version", 0)))
    return None


class Identity:
    """A key part that is one object (a policy) by identity; holding it keeps its id from reuse."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Identity) and other.obj is self.obj


class Versioned(Protocol):
    """What the caches read of the state that owns them (:class:`~devshare.engine.state.ClusterState`)."""

    @property
    def layout(self) -> int: ...

    @property
    def n_rows(self) -> int: ...


class EngineCaches:
    """The caches of one :class:`~devshare.engine.state.ClusterState`."""

    def __init__(self, state: Versioned) -> None:
        self.state = state
        self._layout_values: dict[Any, Any] = {}
        self._layout_at = -1
        self._per_node: dict[str, LRU[Any, Any]] = {}

    def per_layout(self, key: Hashable, make: Callable[[], T]) -> T:
        """A value derived from the nodes and devices only, made once per ``state.layout``."""
        if self._layout_at != self.state.layout:
            self._layout_values.clear()
            self._layout_at = self.state.layout
        try:
            return self._layout_values[key]  # type: ignore[no-any-return]
        except KeyError:
            value = self._layout_values[key] = make()
            return value

    def per_node(self, kind: str, key: Hashable, make: Callable[[int], A]) -> A:
        """The per-node arrays of answers of ``kind`` under ``key``: a tuple of arrays over node indexes,
        made by ``make(n)`` for ``n`` of them, and made afresh when the state has more nodes than the
        first array is long. The caller stores each node's answer with the node's ``row_version`` and
        trusts it only while that holds. The key is joined with ``state.layout``: indexes may name
        other nodes after a layout change."""
        lru = self._per_node.get(kind)
        if lru is None:
            lru = self._per_node[kind] = LRU(NODE_ANSWER_KEYS)
        full = (key, self.state.layout)
        n = max(self.state.n_rows, 1)
        entry: A | None = lru.get(full)
        if entry is None or entry[0].shape[0] < n:
            entry = lru.put(full, make(n))
        return entry

    def clear(self, kind: str | None = None) -> None:
        """Forget the per-node answers of ``kind``, or every answer (benchmarks' cold runs)."""
        if kind is None:
            self._layout_values.clear()
            self._layout_at = -1
        for k, lru in self._per_node.items():
            if kind is None or k == kind:
                lru.clear()
