"""Candidate node lists resolved against the state, and prioritize answers encoded per row.

kube-scheduler with ``nodeCacheCapable: true`` sends the same ``NodeNames`` list (every node) with
each filter, and prioritize sends back the list the filter passed. Resolving thousands of names
to state rows, and building thousands of ``{"Host", "Score"}`` objects, cost more than the engine's
evaluation itself, so:

- :class:`NodeSets` keeps the last few lists, keyed by their raw JSON bytes, as a :class:`NodeSet`
  (names, rows, an object array of the names for masking); dropped whenever the state's nodes or
  devices change (``ClusterState.layout``: node indexes may then be reused by other nodes);
- :class:`PriorityEncoder` keeps, per state row and score 0..10, the JSON fragment
  ``{"Host":"<node>","Score":<s>}``; an answer is one fancy index and one ``bytes.join``.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import numpy as np
import numpy.typing as npt

from devshare.engine.state import ClusterState
from devshare.server.extender.cache import ByteLRU
from devshare.server.extender.scores import MAX_SCORE
from devshare.server.extender.wire import decode_names

Ints = npt.NDArray[np.int64]
Names = npt.NDArray[np.object_]


@dataclass
class NodeSet:
    """A candidate list: ``names`` as sent; ``rows`` and ``known`` (object array) of the names the
    state knows, in the same order; ``unknown`` names."""

    names: list[str]
    rows: Ints
    known: Names
    unknown: list[str]

    def names_json(self, idx: Ints) -> bytes:
        """The JSON array of the known names at ``idx``: one gather of the object array and one msgspec
        encode, no work per name of the list in Python. (Per-name fragments kept with the list were
        cheaper only when kube-scheduler sent the same list again; with ``percentageOfNodesToScore``
        it sends a rotating window, a new list nearly every time: 2.3 ms for 5,000 names against
        0.17 ms.)"""
        return msgspec.json.encode(self.known[idx].tolist())


def resolve(state: ClusterState, names: list[str]) -> NodeSet:
    rows, known, unknown = state.indexes_of(names)
    return NodeSet(names, rows, _objects(known), unknown)


def _objects(names: list[str]) -> Names:
    out = np.empty(len(names), dtype=object)
    out[:] = names
    return out


NODESETS_BYTES = 64 * 2**20  # budget of the lists kept (a list of 5,000 names keeps about 0.5 MB)
BYTES_PER_NAME = 160  # a name kept: its str, list slot, object-array slot, row, JSON fragment


class NodeSets:
    """Raw ``NodeNames`` bytes -> :class:`NodeSet`, for the ``size`` lists used last, within a
    budget of ``budget`` bytes."""

    def __init__(self, state: ClusterState, size: int = 16, budget: int = NODESETS_BYTES) -> None:
        self.state = state
        self.size = size
        self._cache: ByteLRU[bytes, NodeSet] = ByteLRU(budget)
        self._layout = -1
        self.hits = 0
        self.misses = 0

    @property
    def bytes(self) -> int:
        """The estimated bytes the lists kept hold."""
        return self._cache.bytes

    def get(self, raw: bytes) -> NodeSet:
        if self.state.layout != self._layout:
            self._cache.clear()
            self._layout = self.state.layout
        hit = self._cache.get(raw)
        if hit is not None:
            self.hits += 1
            return hit
        self.misses += 1
        out = resolve(self.state, decode_names(raw))
        self._cache.put(raw, out, len(raw) + BYTES_PER_NAME * len(out.names))
        while len(self._cache) > self.size:
            self._cache.pop_oldest()
        return out


class Fragments:
    """JSON array elements, each with a leading comma, gathered by index into one JSON array.

    The elements are padded with spaces (JSON whitespace between elements) to one width in a byte
    array, so an array is one gather and one copy of contiguous memory: joining thousands of separate
    bytes objects costs about three times as much in the server, where they lie scattered in memory.
    When a few elements are far longer than the rest, padding every one to them would bloat the
    answer: those fragments are joined instead."""

    def __init__(self, parts: list[bytes]) -> None:
        lengths = sorted(len(p) for p in parts if p)
        width = lengths[-1] if lengths else 0
        self._fixed: npt.NDArray[np.uint8] | None = None
        self._parts: npt.NDArray[np.object_] | None = None
        if lengths and width <= 2 * lengths[len(lengths) // 2]:
            fixed = np.array([p.ljust(width) for p in parts], dtype=f"S{width}")
            self._fixed = fixed.view(np.uint8).reshape(len(parts), width)
        else:
            self._parts = np.empty(len(parts), dtype=object)
            self._parts[:] = parts

    def array(self, idx: Ints) -> bytes:
        """``[`` the elements at ``idx``, in that order ``]``."""
        if idx.size == 0:
            return b"[]"
        if self._fixed is not None:
            body = np.take(self._fixed, idx, axis=0).tobytes()
        else:
            assert self._parts is not None
            body = b"".join(self._parts[idx].tolist())
        return b"[" + body[1:] + b"]"  # the first element's comma dropped


_SCORE_TAILS = [f"{s}}}".encode() for s in range(MAX_SCORE + 1)]
_SCORES = MAX_SCORE + 1


class PriorityEncoder:
    """The JSON of a HostPriorityList from rows and scores (0..10), without per-node objects: each
    row keeps its eleven elements ``,{"Host":"<name>","Score":<s>}`` (:class:`Fragments`)."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._frags: npt.NDArray[np.object_] = np.empty((0, _SCORES), dtype=object)
        self._names: list[str | None] = []
        self._layout = -1
        self._all: Fragments | None = None

    def _sync(self) -> None:
        state = self.state
        if state.layout == self._layout:
            return
        n = state.n_rows
        if n > self._frags.shape[0]:
            grown = np.empty((max(n, 2 * self._frags.shape[0]), _SCORES), dtype=object)
            grown[: self._frags.shape[0]] = self._frags
            grown[self._frags.shape[0]:] = b""
            self._frags = grown
            self._names += [None] * (grown.shape[0] - len(self._names))
        changed = False
        for row in range(n):
            name = state.name_at(row)
            if name is not None and name != self._names[row]:
                head = b',{"Host":' + msgspec.json.encode(name) + b',"Score":'
                self._frags[row] = [head + tail for tail in _SCORE_TAILS]
                self._names[row] = name
                changed = True
        if changed or self._all is None:
            self._all = Fragments(self._frags.reshape(-1).tolist())
        self._layout = state.layout

    def encode(self, rows: Ints, scores: Ints) -> bytes:
        """``[{"Host": name of row, "Score": score}, ...]`` in the order of ``rows``."""
        self._sync()
        assert self._all is not None
        return self._all.array(rows * _SCORES + scores)


def encode_priorities(names: list[str], scores: list[int]) -> bytes:
    """The same JSON from names (the general path: unknown nodes, groups)."""
    return msgspec.json.encode([{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)])
