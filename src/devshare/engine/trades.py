"""Trades as the scheduler follows them: two writes, applied together.

The node agent corrects the allocations of two identical pods whose devices kubelet's Allocate
handed out crosswise by rewriting each pod's annotations to the other's (:mod:`devshare.model.trade`),
one write per pod, each tagged ``devshare.io/trade: <partner uid>``. Applied one by one, the first
write would count the partner's devices twice (or be refused as over-booking) until the second
arrives. So a tagged change of a recorded allocation is *parked* (the pod keeps its old record)
until its partner's tagged change arrives; then both are applied together, when together they
exchange exactly what the two records hold (the usage does not change). Writes linked by their tags
are taken as one group, and failing that all those parked on the node, so pods that traded several
times, seen at once after a re-list, are followed too. A parked
write whose partner does not come within ``timeout`` seconds (or is not an exact exchange), or whose
partner is gone, is applied alone through the over-booking check (:meth:`Trades.expire`, called
periodically by whoever follows the cluster).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import msgspec

from devshare.engine.lifecycle import Lifecycle
from devshare.model.allocation import PodAllocation
from devshare.model.names import TRADE

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0  # s a trade's first write waits for the second


class Parked(msgspec.Struct, kw_only=True):
    key: str
    uid: str
    partner: str  # the partner's uid
    obj: dict[str, Any]
    alloc: PodAllocation
    since: float


Record = Callable[[str, dict[str, Any], PodAllocation], None]


class Trades:
    """The trade writes waiting for their partner. ``record(key, obj, alloc)`` applies one pod's
    allocation through the over-booking check (:meth:`WatchedCluster._record_bound`)."""

    def __init__(self, lifecycle: Lifecycle, record: Record, *, clock: Callable[[], float],
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        self.lifecycle = lifecycle
        self.state = lifecycle.state
        self.record = record
        self.timeout = timeout
        self.clock = clock
        self.parked: dict[str, Parked] = {}  # by the parked pod's uid
        self.exchanged = 0  # trades applied (exact exchanges)
        self.unpaired = 0  # trade writes applied alone (partner late, gone, or not an exchange)

    def offer(self, key: str, uid: str, obj: dict[str, Any], alloc: PodAllocation) -> bool:
        """A bound pod's new allocation ``alloc`` differs from its record: True when it is a trade write
        this book took (parked, or applied with its partner's); False: apply it as usual."""
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        partner = annotations.get(TRADE) if isinstance(annotations, dict) else None
        if not partner or not uid or partner == uid:
            return False
        old = self.parked.get(uid)
        same = old is not None and old.partner == partner and old.alloc == alloc
        self.parked[uid] = Parked(key=key, uid=uid, partner=partner, obj=obj, alloc=alloc,
                                  since=old.since if old is not None and same else self.clock())
        # the writes linked by their tags, else all those parked on the node, once they exchange exactly
        # what the pods' records hold, are applied together (the usage stays what it was)
        if not self._exchange(self._group(uid)):
            self._exchange([p for p in self.parked.values() if p.alloc.node == alloc.node])
        return True

    def _exchange(self, group: list[Parked | str]) -> bool:
        """Apply the parked writes of ``group`` when, with its other pods unchanged, they exchange
        exactly what the group's records hold."""
        parked = [m for m in group if isinstance(m, Parked)]
        records = [self.state.pods.get(m.key if isinstance(m, Parked) else m) for m in group]
        if len(parked) < 2 or any(r is None for r in records):
            return False
        held = [r.allocation for r in records if r is not None]
        new = [m.alloc if isinstance(m, Parked) else r.allocation for m, r in zip(group, records, strict=True)
               if r is not None]
        if Counter(held) != Counter(new):
            return False
        for m, r in zip(group, records, strict=True):
            if isinstance(m, Parked) and r is not None:
                self._unpark(m.uid)
                self.lifecycle.release(m.key)
                self.lifecycle.add_watched(r.pod, m.alloc, checked=False)
        self.exchanged += 1
        log.info("pods %s traded allocations", ", ".join(sorted(m.key for m in parked)))
        return True

    def _group(self, uid: str) -> list[Parked | str]:
        """The pods linked to ``uid`` by the tags of parked writes: their parked writes, and the keys
        of linked pods with nothing parked (usually just the partner's write; after a re-list, a pod
        that traded twice may show no change at all while its two partners exchanged through it)."""
        keys = {r.pod.uid: k for k, r in self.state.pods.items() if r.pod.uid}
        seen = {uid}
        todo = [uid]
        while todo:
            u = todo.pop()
            p = self.parked.get(u)
            linked = [q.uid for q in self.parked.values() if q.partner == u]
            if p is not None:
                linked.append(p.partner)
            for v in linked:
                if v not in seen and (v in self.parked or v in keys):
                    seen.add(v)
                    todo.append(v)
        return [self.parked[u] if u in self.parked else keys[u] for u in sorted(seen)]

    def settled(self, uid: str) -> None:
        """The pod's allocation is its record again (or it has none): nothing of it stays parked."""
        if uid in self.parked:
            self._unpark(uid)

    def gone(self, uid: str) -> None:
        """The pod ``uid`` is deleted or finished: its parked write is dropped, and the writes waiting
        for it as a partner are applied alone."""
        self.settled(uid)
        for p in [p for p in self.parked.values() if p.partner == uid]:
            self._apply_alone(p, "its partner is gone")

    def expire(self) -> list[str]:
        """Apply alone every parked write older than the timeout; returns their pods."""
        now = self.clock()
        late = [p for p in self.parked.values() if now - p.since >= self.timeout]
        for p in late:
            try:
                self._apply_alone(p, f"its partner's write did not come within {self.timeout:g}s")
            except Exception:  # never let one pod stop the others
                log.exception("pod %s: applying its trade write failed", p.key)
        return [p.key for p in late]

    def _apply_alone(self, p: Parked, why: str) -> None:
        self._unpark(p.uid)
        self.unpaired += 1
        log.warning("pod %s: applying its trade write alone (%s), through the over-booking check", p.key, why)
        self.record(p.key, p.obj, p.alloc)

    def _unpark(self, uid: str) -> None:
        self.parked.pop(uid, None)
