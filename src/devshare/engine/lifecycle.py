"""The one cache of pods' devices and of every timed hold, as kube-scheduler's cache
(``pkg/scheduler/internal/cache``: AssumePod, FinishBinding, ForgetPod, expiry, AddPod/RemovePod).

::

    arrived ──► (placed by the engine) ──► assume(hold) ──► confirm (bound) ──► remove_watched
                                              │
                                              ├──► forget   (the bind failed, the filter's hold dropped)
                                              └──► expire   (no bind before the deadline, none in flight)

    the watch ──► add_watched (a bound pod's annotation: the truth) / remove_watched (deleted, finished)
              ──► add_placed (a pod another scheduler placed) / count_plain, uncount_plain (a pod's CPU
                  and memory only)

Every record of :class:`~devshare.engine.state.ClusterState` is changed here and nowhere else (its
changing methods are private to this module): the extender (plain pods, filter holds, group plans,
gang quorums, claims of other replicas), the watch (bound pods, trades, the over-booking check),
``devshare schedule`` and the trace replay. So the policy's hooks are called the same way everywhere
(:meth:`Lifecycle.arrived` once per pod before it is scored, :meth:`Lifecycle.confirm` after its
usage is in the state), and a dry run predicts the extender.

A timed hold of any kind lives here, with its deadline: an assumed allocation is held for a *bind*,
for a *filter*'s answer waiting for its bind, or for a *group* plan (:data:`~devshare.engine.state.Hold`);
a *nomination* holds a node (not devices) for a preemptor until it binds. :meth:`Lifecycle.expire`
releases them all. What-if questions are asked on a copy (:class:`WhatIf`), never on the live records.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from devshare.engine.policies.base import Policy
from devshare.engine.records import Hold, PodRecord
from devshare.engine.scheduler import Placement, Scheduler
from devshare.engine.state import DEFAULT_ASSUME_TTL, ClusterState
from devshare.model.allocation import PodAllocation
from devshare.model.request import PodRequest

SEEN_LIMIT = 65536  # pods remembered as told to the policy (the oldest are forgotten first)


@dataclass
class Nomination:
    """A node held for a preemptor (``pod``, ``ns/name``) while its victims leave: pods of lower
    priority do not pass it until the preemptor binds, is deleted, or ``expires_at`` passes."""

    pod: str
    uid: str
    priority: int
    node: str
    victims: list[str]
    expires_at: float


class Lifecycle:
    """Assume, confirm, forget and expire the allocations of one scheduler's state; add and remove the
    pods the watch reports; hold nodes for preemptors."""

    def __init__(self, scheduler: Scheduler, *, ttl: float = DEFAULT_ASSUME_TTL) -> None:
        self.scheduler = scheduler
        self.state: ClusterState = scheduler.state
        self.ttl = ttl
        self._binding: set[str] = set()  # pods whose bind is in flight: never expired meanwhile
        self._seen: dict[bytes, None] = {}  # pods told to the policy (a digest of key and uid), oldest first
        self.nominations: dict[str, Nomination] = {}  # preemptor key -> the node held for it

    @property
    def policy(self) -> Policy:
        return self.scheduler.policy

    # ------------------------------------------------------------------ arrival
    def arrived(self, pod: PodRequest) -> None:
        """Tell the policy of the pod once (by key and uid), before it is scored: a learning policy
        (devshare's) learns the task mix from the pods that arrive. Pods another scheduler places are
        not told: devshare's policy packs against the pods it places itself (told of the CPU-only pods
        kube-scheduler's default profile spreads, it stranded more: 4.29 -> 4.44% on openb seed 42)."""
        # a fixed-size digest: names and uids come from requests and may be of any length
        seen = hashlib.blake2b(f"{pod.key}\0{pod.uid}".encode(), digest_size=16).digest()
        if seen in self._seen:
            return
        if len(self._seen) >= SEEN_LIMIT:
            del self._seen[next(iter(self._seen))]
        self._seen[seen] = None
        self.policy.observe(pod)

    def filter_begins(self, pod: PodRequest, now: float) -> dict[str, str]:
        """What a filter of ``pod`` (not a group member) changes in the cache, before its nodes are
        judged: the policy learns of it (:meth:`arrived`); what an earlier filter of it held is let
        go (that answer no longer stands); and the nodes nominated for pending pods of higher priority
        are returned, with why (:meth:`nominated_nodes`): they are not for ``pod``."""
        self.arrived(pod)
        if self.held(pod.key, "filter") is not None:
            self.forget(pod.key)
        return self.nominated_nodes(pod, now)

    # ------------------------------------------------------------------ assume
    def assume(self, pod: PodRequest, alloc: PodAllocation, *, now: float, hold: Hold = "bind",
               ttl: float | None = None, expires_at: float | None = None, group: str | None = None) -> None:
        """Hold ``alloc`` for ``pod`` (for ``hold``) until it is confirmed, forgotten or expired; all or
        nothing (:class:`~devshare.engine.state.Conflict` when it no longer fits). The deadline is
        ``expires_at`` when given, else ``now + ttl`` (``ttl`` defaults to the lifecycle's; ``math.inf``
        holds until forgotten). ``group``: a group plan's placeholder for a member to come (the group key)."""
        if expires_at is None:
            t = self.ttl if ttl is None else ttl
            expires_at = math.inf if math.isinf(t) else now + t
        self.state._assume(pod, alloc, expires_at=None if math.isinf(expires_at) else expires_at, hold=hold,
                           group=group)

    def held(self, key: str, hold: Hold) -> PodRecord | None:
        """The assumed record of ``key`` when it is held for ``hold`` (and no bind of it is in flight)."""
        rec = self.state.pods.get(key)
        if rec is None or rec.phase != "assumed" or rec.hold != hold or key in self._binding:
            return None
        return rec

    def extend(self, key: str, expires_at: float) -> None:
        """Move an assumed allocation's deadline (a group plan's time was pushed back)."""
        rec = self.state.pods.get(key)
        if rec is not None and rec.phase == "assumed":
            rec.expires_at = expires_at

    # ------------------------------------------------------------------ binding
    def binding(self, key: str) -> bool:
        """True while a bind of ``key`` is in flight."""
        return key in self._binding

    @contextmanager
    def bind_in_flight(self, key: str) -> Iterator[None]:
        """Mark ``key``'s bind as in flight for the block (its assumed allocation does not expire)."""
        self._binding.add(key)
        try:
            yield
        finally:
            self._binding.discard(key)

    def confirm(self, pod: PodRequest, alloc: PodAllocation) -> str | None:
        """The pod is bound with ``alloc`` (kube-scheduler's FinishBinding + the informer's add): its
        allocation becomes bound (recorded afresh if its assumption expired meanwhile: the annotation
        is the truth) and the policy is told. Returns why the devices are now over-used, if they are."""
        state = self.state
        rec = state.pods.get(pod.key)
        reason = None
        if rec is None and state.is_finished(pod.key, pod.uid):
            return None  # the watch saw it finish or go before this confirmation: nothing to hold
        if rec is not None and rec.phase == "bound":
            pass  # the watch saw the bound pod first and recorded its annotation
        elif rec is not None and rec.allocation == alloc:
            state._bind(pod.key)
        else:
            reason = state._add_bound(pod, alloc)
        self.nominations.pop(pod.key, None)  # bound: its node is nobody's any more
        row = state.row_of.get(alloc.node)
        if row is not None:
            self.policy.placed(pod, row)
        return reason

    def forget(self, key: str, alloc: PodAllocation | None = None) -> bool:
        """Undo an assumed allocation (its bind failed; only if it is still ``alloc`` when given).
        Bound allocations are left alone. True when something was released."""
        rec = self.state.pods.get(key)
        if rec is None or rec.phase != "assumed" or (alloc is not None and rec.allocation != alloc):
            return False
        self.state._release(key)
        return True

    def release(self, key: str) -> PodRecord | None:
        """Give back whatever ``key`` holds, assumed or bound (a gang member gone, a plan dropped, a
        record made from another replica's claim that left the ledger)."""
        return self.state._release(key)

    # ------------------------------------------------------------------ the watch's pods
    def add_watched(self, pod: PodRequest, alloc: PodAllocation, *, checked: bool = True) -> str | None:
        """A bound pod as the watch (or another replica's claim) shows it: its allocation is recorded
        as bound. ``checked``: unless it would over-book a card (then nothing changes and the reason is
        returned); otherwise recorded whatever it books (the reason is returned all the same)."""
        if checked:
            return self.state._add_bound_checked(pod, alloc)
        return self.state._add_bound(pod, alloc)

    def add_placed(self, pod: PodRequest, alloc: PodAllocation, *, peer: str,
                   problems: tuple[str, ...] = ()) -> str | None:
        """A bound pod another scheduler (``peer``, a dialect) placed, its allocation read from that
        scheduler's annotations: counted whole, never refused (it runs on those cards). Returns the
        over-booking, if any (kept in the record's problems)."""
        return self.state._add_placed(pod, alloc, peer=peer, problems=problems)

    def count_plain(self, key: str, node: str, cpu_milli: int, memory_bytes: int) -> None:
        """A bound pod holding no record (another scheduler's, one asking no device, one whose allocation
        is not counted) takes this CPU and memory of its node (issue 41)."""
        self.state._set_plain(key, node, cpu_milli, memory_bytes)

    def uncount_plain(self, key: str) -> None:
        """Stop counting what :meth:`count_plain` counted for ``key``."""
        self.state._remove_plain(key)

    def remove_watched(self, key: str, uid: str) -> PodRecord | None:
        """The pod is deleted or finished: what it holds is released, and it is remembered (by key and
        uid) so that a late confirmation never records it again."""
        self.nominations.pop(key, None)
        return self.state._release_finished(key, uid)

    # ------------------------------------------------------------------ nominations
    def nominate(self, nomination: Nomination) -> None:
        self.nominations[nomination.pod] = nomination

    def nominated(self, key: str, uid: str, now: float) -> Nomination | None:
        """The node held for the preemptor ``key`` (of ``uid``), while it holds."""
        nom = self.nominations.get(key)
        return nom if nom is not None and nom.uid == uid and nom.expires_at > now else None

    def nominated_nodes(self, pod: PodRequest, now: float) -> dict[str, str]:
        """Nodes held for a pending pod of higher priority than ``pod``: not for ``pod`` (why, by node)."""
        if not self.nominations:
            return {}
        out: dict[str, str] = {}
        for key, nom in list(self.nominations.items()):
            if nom.expires_at <= now:
                del self.nominations[key]
            elif key != pod.key and nom.priority > pod.priority:
                out[nom.node] = f"devices freed by preemption for pod {key} (priority {nom.priority})"
        return out

    def drop_nomination(self, key: str) -> None:
        self.nominations.pop(key, None)

    # ------------------------------------------------------------------ expiry
    def expire(self, now: float) -> list[str]:
        """Release assumed allocations past their deadline whose bind is not in flight, and drop the
        nominations past theirs. Returns the pods whose devices were released."""
        gone = [k for k, r in self.state.pods.items()
                if r.phase == "assumed" and r.expires_at is not None and r.expires_at <= now
                and k not in self._binding]
        for k in gone:
            self.state._release(k)
        for k in [k for k, n in self.nominations.items() if n.expires_at <= now]:
            del self.nominations[k]
        return gone

    # ------------------------------------------------------------------ what-if
    def what_if(self, nodes: Iterable[str]) -> WhatIf:
        """A copy of ``nodes`` and what they hold, to change freely (:class:`WhatIf`)."""
        return WhatIf(self.state.scratch(nodes))

    # ------------------------------------------------------------------ one step
    def schedule(self, pod: PodRequest, *, now: float, arrives: bool = True,
                 nodes: Sequence[str] | None = None) -> Placement | None:
        """What the extender does for one pod, in one synchronous step (``devshare schedule``, the
        trace replay): the pod arrives, the best node is chosen, assumed and confirmed. ``arrives``:
        tell the policy of the pod (the extender never hears of a pod that asks no device).
        ``nodes``: the candidates (kube-scheduler's window, :mod:`devshare.sim.window`); every node
        when None."""
        if arrives:
            self.arrived(pod)
        placed = self.scheduler.place(pod, nodes)
        if placed is None:
            return None
        self.assume(pod, placed.allocation, now=now, ttl=math.inf)
        self.confirm(pod, placed.allocation)
        return placed


class WhatIf:
    """A scratch copy of some nodes (:meth:`ClusterState.scratch`), whose records may be taken, added
    and released to ask what would fit if they were: which victims make room, how many members a node
    takes, whether a claim fits beside others. The live state is never touched."""

    def __init__(self, state: ClusterState) -> None:
        if not state.is_scratch:
            raise ValueError("a what-if is asked on a scratch copy (ClusterState.scratch), never on the live state")
        self.state = state

    def take(self, pod: PodRequest, alloc: PodAllocation) -> None:
        """Hold ``alloc`` for ``pod``, all or nothing (:class:`~devshare.engine.state.Conflict`)."""
        self.state._assume(pod, alloc, expires_at=None, hold="bind")

    def add(self, pod: PodRequest, alloc: PodAllocation) -> None:
        """Count ``alloc`` for ``pod`` as bound, whatever it books."""
        self.state._add_bound(pod, alloc)

    def release(self, key: str) -> PodRecord | None:
        return self.state._release(key)
