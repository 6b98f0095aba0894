"""The pods devshare refused lately, and why: the one record the ``/ui`` page's queue reads.

The extender notes here every filter that passed no node (with the reasons its failed nodes gave,
counted: "4,998 nodes: needs one gpu with 60 percent compute: no card has that much free") and every
bind it refused. A pod leaves the record when it is bound, deleted or placed by the watch. Bounded:
at most ``max_pods`` pods (the pod refused longest ago is forgotten first) and the last
``per_pod`` refusals of each.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MAX_PODS = 1000
PER_POD = 5
REASONS_SHOWN = 3  # distinct reasons kept per refusal (the most common first)
MAX_KEY = 317  # namespace (63) / name (253): a longer key from a request body is cut
MAX_REASON = 2000


@dataclass(frozen=True)
class Refusal:
    verb: str  # "filter" or "bind"
    at: float  # seconds since the epoch (the clock given to the record)
    reason: str  # what a person reads: the reasons by node count, or the bind's error
    nodes: int  # nodes refused (0 for a bind refusal or an error of the whole request)


def summarize(reasons: Iterable[str]) -> tuple[str, int]:
    """Node reasons, counted: ``"3 nodes: reason a; 1 node: reason b"`` (the most common first, at
    most :data:`REASONS_SHOWN`, then "and N more reasons"), and the count of nodes."""
    counts = Counter(reasons)
    total = sum(counts.values())
    common = counts.most_common(REASONS_SHOWN)
    parts = [f"{n:,} node{'s' if n != 1 else ''}: {why}" for why, n in common]
    if len(counts) > REASONS_SHOWN:
        parts.append(f"and {len(counts) - REASONS_SHOWN} more reasons")
    return "; ".join(parts), total


class RefusalLog:
    def __init__(self, clock: Callable[[], float], *, max_pods: int = MAX_PODS, per_pod: int = PER_POD) -> None:
        self.clock = clock  # wall-clock seconds (time.time): shown as a date
        self.max_pods = max_pods
        self.per_pod = per_pod
        self._pods: OrderedDict[str, deque[Refusal]] = OrderedDict()  # oldest refusal first
        self.recorded = 0  # refusals noted in all

    def refused(self, key: str, verb: str, reason: str, nodes: int = 0) -> None:
        """``key`` (``namespace/name``) was refused by ``verb``."""
        self.recorded += 1
        key, reason = key[:MAX_KEY], reason[:MAX_REASON]
        kept = self._pods.pop(key, None)
        if kept is None:
            kept = deque(maxlen=self.per_pod)
        kept.append(Refusal(verb, self.clock(), reason, nodes))
        self._pods[key] = kept  # the most recent last
        while len(self._pods) > self.max_pods:
            self._pods.popitem(last=False)

    def forget(self, key: str) -> None:
        """``key`` was bound, deleted, or placed: it is no longer waiting."""
        self._pods.pop(key, None)

    def __contains__(self, key: str) -> bool:
        return key in self._pods

    def __len__(self) -> int:
        return len(self._pods)

    def recent(self, limit: int) -> list[tuple[str, list[Refusal]]]:
        """The ``limit`` pods refused most recently, the latest first, each with its refusals (oldest
        first). A copy: read off the event loop while the record goes on."""
        out: list[tuple[str, list[Refusal]]] = []
        for key in reversed(self._pods):
            if len(out) >= limit:
                break
            out.append((key, list(self._pods[key])))
        return out
