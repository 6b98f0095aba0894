"""Candidate node lists resolved against the state, and prioritize answers encoded per row.

kube-scheduler with ``nodeCacheCapable: true`` sends the candidates' names (``NodeNames``) with
each filter: a window of its nodes (its ``percentageOfNodesToScore``, 500 at 5,000 nodes), a new
window nearly every time, and prioritize sends back the list the filter passed. Resolving the names
to state rows, and building thousands of ``{"Host", "Score"}`` objects, cost more than the engine's
evaluation itself, so:

- :class:`NameTable` reads a ``NodeNames`` array straight into rows, without a Python string or a
  dict lookup per name (rebuilt when a node comes or goes);
- :class:`NodeSets` keeps the last few lists, keyed by their raw JSON bytes, as a :class:`NodeSet`
  (rows, an object array of the names for masking); dropped whenever the state's nodes or
  devices change (``ClusterState.layout``: node indexes may then be reused by other nodes);
- :class:`PriorityEncoder` keeps, per state row and score 0..10, the JSON fragment
  ``{"Host":"<node>","Score":<s>}``; an answer is one fancy index and one ``bytes.join``.
"""

from __future__ import annotations

import msgspec
import numpy as np
import numpy.typing as npt

from devshare.engine.caches import LRU
from devshare.engine.state import ClusterState
from devshare.server.extender.scores import MAX_SCORE
from devshare.server.extender.wire import decode_names

Ints = npt.NDArray[np.int64]
Names = npt.NDArray[np.object_]


class NodeSet:
    """A candidate list: ``rows`` of the names the state knows, in the order sent, and ``unknown``
    names; ``known`` (an object array of the known names, for masking) and ``names`` (every name as
    sent) are made when first asked for."""

    __slots__ = ("_by_row", "_known", "_names", "rows", "unknown")

    def __init__(self, rows: Ints, known: Names | None = None, unknown: list[str] | None = None,
                 names: list[str] | None = None, by_row: Names | None = None) -> None:
        assert known is not None or by_row is not None
        self.rows = rows
        self.unknown = unknown or []
        self._known = known
        self._by_row = by_row  # the names by state row, when ``known`` is to be gathered from it
        self._names = names

    @property
    def known(self) -> Names:
        if self._known is None:
            assert self._by_row is not None
            self._known = self._by_row[self.rows]
        return self._known

    @property
    def names(self) -> list[str]:
        if self._names is None:  # every name is known: they are the known ones, in order
            self._names = list(self.known.tolist())
        return self._names

    def names_at(self, idx: Ints) -> list[str]:
        """The known names at ``idx`` (indexes into ``rows``)."""
        if self._known is None and self._by_row is not None:
            return list(self._by_row[self.rows[idx]].tolist())
        return list(self.known[idx].tolist())

    def names_json(self, idx: Ints) -> bytes:
        """The JSON array of the known names at ``idx``: one gather of an object array and one msgspec
        encode, no work per name of the list in Python. (Per-name fragments kept with the list were
        cheaper only when kube-scheduler sent the same list again; with ``percentageOfNodesToScore``
        it sends a rotating window, a new list nearly every time: 2.3 ms for 5,000 names against
        0.17 ms.)"""
        return msgspec.json.encode(self.names_at(idx))


def resolve(state: ClusterState, names: list[str]) -> NodeSet:
    rows, known, unknown = state.indexes_of(names)
    return NodeSet(rows, _objects(known), unknown, names=names)


def _objects(names: list[str]) -> Names:
    out = np.empty(len(names), dtype=object)
    out[:] = names
    return out


# odd 64-bit multipliers, one per 8 bytes of a name's JSON (a node name is at most 253 characters)
_MIX = np.random.default_rng(2026).integers(1, 2**63, 32, dtype=np.uint64) * np.uint64(2) + np.uint64(1)


class NameTable:
    """The state's node names as JSON spells them, to read a ``NodeNames`` array straight into rows.

    Each name's JSON string, quotes included, zero-padded to one width (a multiple of 8 bytes), and a
    64-bit key folded from its bytes, found in its bucket of a hash table of the keys. A window of names
    is then one split of the bytes, one conversion, one gather of buckets and one comparison of the
    bytes found: no Python string and no dict lookup per name. In the real extender, beside the API
    server and kube-scheduler on the same cores, the dict lookups missed the CPU's caches on nearly
    every name: 450-525 us of CPU for a 500-name window at 5,000 nodes, 135 us for the same lookups again
    a moment later.

    Exact: a name is found only when its bytes equal the table's, so an array this reads is the compact
    JSON of known names (anything else, including unknown names, whitespace and escapes, is None and
    the caller decodes it)."""

    def __init__(self, name_of: dict[int, str]) -> None:
        self.rows = np.fromiter(name_of.keys(), np.int64, len(name_of))
        self.by_row = np.empty(int(self.rows.max()) + 1 if self.rows.size else 0, dtype=object)
        self.by_row[self.rows] = list(name_of.values())
        spelled_list = [msgspec.json.encode(n) for n in name_of.values()]
        # at least one zero byte after the longest: a longer element, cut to the width by numpy, matches none
        self.width = (max(map(len, spelled_list), default=0) // 8 + 1) * 8
        if self.width > 8 * len(_MIX) or not spelled_list:
            self.width = 0  # longer than Kubernetes allows (or no node): the caller decodes every list
            return
        self.spelled = np.array(spelled_list, dtype=f"S{self.width}")
        table = _hash_table(self._keys(self.spelled))
        if table is None:
            self.width = 0  # more names than a bucket holds share one key: the caller decodes every list
            return
        self._shift, self._bucket_keys, self._bucket_index = table

    def _keys(self, spelled: npt.NDArray[np.bytes_]) -> npt.NDArray[np.uint64]:
        words = self.width // 8
        out: npt.NDArray[np.uint64] = spelled.view(np.uint64).reshape(len(spelled), words) @ _MIX[:words]
        return out  # wraps modulo 2**64

    def find(self, raw: bytes) -> NodeSet | None:
        """The :class:`NodeSet` of the JSON array ``raw`` when every element is a name of the table
        spelled as the table spells it; None otherwise."""
        if not self.width or raw[:1] != b"[" or raw[-1:] != b"]" or b"\0" in raw:
            return None  # (numpy drops trailing zero bytes: a name followed by one would match)
        spelled = np.array(raw[1:-1].split(b","), dtype=f"S{self.width}")
        keys = self._keys(spelled)
        bucket = (keys >> self._shift).astype(np.intp)
        same = self._bucket_keys[bucket] == keys[:, None]
        at = self._bucket_index[bucket, same.argmax(axis=1)]  # no equal key: the first slot, the bytes decide
        if not (self.spelled[at] == spelled).all():
            return None
        return NodeSet(self.rows[at], by_row=self.by_row)


BUCKET = 8  # keys per bucket of the name table's hash table


def _hash_table(keys: npt.NDArray[np.uint64]) -> tuple[np.uint64, npt.NDArray[np.uint64], npt.NDArray[np.intp]] | None:
    """A hash table of ``keys``: buckets of ``BUCKET`` slots, a key's bucket its top bits, as many
    buckets (a power of two, at least half as many as keys) as make no bucket hold more than ``BUCKET``
    keys, so that a key is always found in its own bucket (one gather, no probing). Returns the shift to
    the bucket, each slot's key and its index into ``keys`` (an empty slot: key 0, index 0); None when
    even 16 buckets a key leave one too full (names made to collide: more than ``BUCKET`` equal keys)."""
    size = 8
    while size < len(keys) // 2:
        size *= 2
    while True:
        shift = np.uint64(64 - (size.bit_length() - 1))
        home = (keys >> shift).astype(np.intp)
        if np.bincount(home, minlength=size).max() <= BUCKET:
            break
        if size > 16 * len(keys):
            return None
        size *= 2
    order = np.argsort(home, kind="stable")
    sorted_home = home[order]
    first = np.searchsorted(sorted_home, sorted_home)  # each key's place within its bucket
    place = np.arange(len(keys)) - first
    bucket_keys = np.zeros((size, BUCKET), np.uint64)
    bucket_index = np.zeros((size, BUCKET), np.intp)
    bucket_keys[sorted_home, place] = keys[order]
    bucket_index[sorted_home, place] = order
    return shift, bucket_keys, bucket_index


NODESETS_BYTES = 64 * 2**20  # budget of the lists kept (a list of 5,000 names keeps about 0.5 MB)
BYTES_PER_NAME = 160  # a name kept: its str, list slot, object-array slot, row, JSON fragment


class NodeSets:
    """Raw ``NodeNames`` bytes -> :class:`NodeSet`, for the ``size`` lists used last, within a
    budget of ``budget`` bytes."""

    def __init__(self, state: ClusterState, size: int = 16, budget: int = NODESETS_BYTES) -> None:
        self.state = state
        self.size = size
        self._cache: LRU[bytes, NodeSet] = LRU(budget, max_entry=budget // 4, maxitems=size)
        self._layout = -1
        self._table: NameTable | None = None
        self._names_version = -1
        self.hits = 0
        self.misses = 0

    @property
    def bytes(self) -> int:
        """The estimated bytes the lists kept hold."""
        return self._cache.currsize

    def get(self, raw: bytes) -> NodeSet:
        if self.state.layout != self._layout:
            self._cache.clear()
            self._layout = self.state.layout
        hit = self._cache.get(raw)
        if hit is not None:
            self.hits += 1
            return hit
        self.misses += 1
        out = self.table().find(raw) or resolve(self.state, decode_names(raw))
        self._cache.put(raw, out, len(raw) + BYTES_PER_NAME * (len(out.rows) + len(out.unknown)))
        return out


    def table(self) -> NameTable:
        """The :class:`NameTable` of the state's nodes now (made again when a node came or went)."""
        if self._table is None or self._names_version != self.state.names_version:
            self._table = NameTable(self.state.name_of)
            self._names_version = self.state.names_version
        return self._table


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
