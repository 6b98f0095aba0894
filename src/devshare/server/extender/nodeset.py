"""Candidate node lists resolved against the state, and prioritize answers encoded per row.

kube-scheduler with ``nodeCacheCapable: true`` sends the same ``NodeNames`` list (every node) with
each filter, and prioritize sends back the list the filter passed. Resolving thousands of names
to state rows, and building thousands of ``{"Host", "Score"}`` objects, cost more than the engine's
evaluation itself, so:

- :class:`NodeSets` keeps the last few lists, keyed by their raw JSON bytes, as a :class:`NodeSet`
  (names, rows, an object array of the names for masking); dropped whenever the state's nodes or
  devices change (``ClusterState.layout_version``: rows may then be reused by other nodes);
- :class:`PriorityEncoder` keeps, per state row and score 0..10, the JSON fragment
  ``{"Host":"<node>","Score":<s>}``; an answer is one fancy index and one ``bytes.join``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import msgspec
import numpy as np
import numpy.typing as npt

from devshare.engine.scheduler import MAX_SCORE
from devshare.engine.state import ClusterState
from devshare.server.extender.wire import decode_names

Ints = npt.NDArray[np.int64]
Names = npt.NDArray[np.object_]


@dataclass(frozen=True)
class NodeSet:
    """A candidate list: ``names`` as sent; ``rows`` and ``known`` (object array) of the names the
    state knows, in the same order; ``unknown`` names."""

    names: list[str]
    rows: Ints
    known: Names
    unknown: list[str]


def resolve(state: ClusterState, names: list[str]) -> NodeSet:
    row_of = state.row_of
    try:
        rows = np.fromiter(map(row_of.__getitem__, names), np.int64, len(names))
        return NodeSet(names, rows, _objects(names), [])
    except KeyError:
        known = [n for n in names if n in row_of]
        unknown = [n for n in names if n not in row_of]
        rows = np.fromiter(map(row_of.__getitem__, known), np.int64, len(known))
        return NodeSet(names, rows, _objects(known), unknown)


def _objects(names: list[str]) -> Names:
    out = np.empty(len(names), dtype=object)
    out[:] = names
    return out


class NodeSets:
    """Raw ``NodeNames`` bytes -> :class:`NodeSet`, for the ``size`` lists used last."""

    def __init__(self, state: ClusterState, size: int = 16) -> None:
        self.state = state
        self.size = size
        self._cache: OrderedDict[bytes, NodeSet] = OrderedDict()
        self._layout = -1
        self.hits = 0
        self.misses = 0

    def get(self, raw: bytes) -> NodeSet:
        if self.state.layout_version != self._layout:
            self._cache.clear()
            self._layout = self.state.layout_version
        hit = self._cache.get(raw)
        if hit is not None:
            self._cache.move_to_end(raw)
            self.hits += 1
            return hit
        self.misses += 1
        out = resolve(self.state, decode_names(raw))
        self._cache[raw] = out
        if len(self._cache) > self.size:
            self._cache.popitem(last=False)
        return out


_SCORE_TAILS = [f"{s}}}".encode() for s in range(MAX_SCORE + 1)]
_SCORES = MAX_SCORE + 1


class PriorityEncoder:
    """The JSON of a HostPriorityList from rows and scores (0..10), without per-node objects.

    Each row keeps its eleven fragments ``,{"Host":"<name>","Score":<s>}``, padded with spaces (JSON
    whitespace) to one width in a fixed-width byte array: an answer is one gather and one copy of
    contiguous memory. (Joining thousands of separate bytes objects costs about three times as much in
    the server, where they lie scattered in memory.) Names much longer than the others would pad
    every fragment; then the fragments are joined instead."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._frags: npt.NDArray[np.object_] = np.empty((0, _SCORES), dtype=object)
        self._names: list[str | None] = []
        self._layout = -1
        self._fixed: npt.NDArray[np.uint8] | None = None

    def _sync(self) -> None:
        state = self.state
        if state.layout_version == self._layout:
            return
        n = state.n_rows
        if n > self._frags.shape[0]:
            grown = np.empty((max(n, 2 * self._frags.shape[0]), _SCORES), dtype=object)
            grown[: self._frags.shape[0]] = self._frags
            self._frags = grown
            self._names += [None] * (grown.shape[0] - len(self._names))
        changed = False
        for row in range(n):
            name = state.name_of.get(row)
            if name is not None and name != self._names[row]:
                head = b',{"Host":' + msgspec.json.encode(name) + b',"Score":'
                self._frags[row] = [head + tail for tail in _SCORE_TAILS]
                self._names[row] = name
                changed = True
        if changed or self._fixed is None:
            self._fixed = _fixed_width(self._frags, self._names)
        self._layout = state.layout_version

    def encode(self, rows: Ints, scores: Ints) -> bytes:
        """``[{"Host": name of row, "Score": score}, ...]`` in the order of ``rows``."""
        self._sync()
        if rows.size == 0:
            return b"[]"
        if self._fixed is not None:  # [row x 11 + score] -> the fragment's bytes, one row of uint8 each
            body = np.take(self._fixed, rows * _SCORES + scores, axis=0).tobytes()
        else:
            body = b"".join(self._frags.reshape(-1)[rows * _SCORES + scores].tolist())
        return b"[" + body[1:] + b"]"  # the first fragment's comma dropped


def _fixed_width(frags: npt.NDArray[np.object_], names: list[str | None]) -> npt.NDArray[np.uint8] | None:
    """The fragments space-padded to one width, as ``[rows x 11, width]`` bytes, or None when padding
    would more than double the typical fragment (a few very long names)."""
    lengths = [len(frags[r, MAX_SCORE]) for r, name in enumerate(names) if name is not None]
    if not lengths:
        return None
    width = max(lengths)
    if width > 2 * sorted(lengths)[len(lengths) // 2]:
        return None
    out = np.full(frags.shape, b" " * width, dtype=f"S{width}")
    for r, name in enumerate(names):
        if name is not None:
            out[r] = [f.ljust(width) for f in frags[r]]
    return out.view(np.uint8).reshape(-1, width)


def encode_priorities(names: list[str], scores: list[int]) -> bytes:
    """The same JSON from names (the general path: unknown nodes, groups)."""
    return msgspec.json.encode([{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)])
