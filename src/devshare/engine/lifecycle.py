"""The assume/bind lifecycle of a pod's devices: one owner, as kube-scheduler's cache
(``pkg/scheduler/internal/cache``: AssumePod, FinishBinding, ForgetPod, expiry).

::

    arrived ──► (placed by the engine) ──► assume ──► confirm (bound) ──► [released by the watch]
                                              │
                                              ├──► forget   (the bind failed)
                                              └──► expire   (no bind before the deadline, none in flight)

Every caller that turns a decision into held devices goes through :class:`Lifecycle`: the extender
(plain pods, group members, gang quorums), ``devshare schedule`` and the trace replay. So the
policy's hooks are called the same way everywhere (:meth:`Lifecycle.arrived` once per pod before it
is scored, :meth:`Lifecycle.confirm` after its usage is in the state), and a dry run predicts the
extender. The accounting itself (all-or-nothing reserve, release) stays in
:class:`~devshare.engine.state.ClusterState`; the watch's view of bound pods (``add_bound``,
``release`` of deleted pods) goes there directly, since it records what already happened.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from devshare.engine.policies.protocol import Policy
from devshare.engine.scheduler import Placement, Scheduler
from devshare.engine.state import DEFAULT_ASSUME_TTL, ClusterState
from devshare.model.allocation import PodAllocation
from devshare.model.request import PodRequest

SEEN_LIMIT = 65536  # pods remembered as told to the policy (the oldest are forgotten first)


class Lifecycle:
    """Assume, confirm, forget and expire the allocations of one scheduler's state."""

    def __init__(self, scheduler: Scheduler, *, ttl: float = DEFAULT_ASSUME_TTL) -> None:
        self.scheduler = scheduler
        self.state: ClusterState = scheduler.state
        self.ttl = ttl
        self._binding: set[str] = set()  # pods whose bind is in flight: never expired meanwhile
        self._seen: dict[bytes, None] = {}  # pods told to the policy (a digest of key and uid), oldest first

    @property
    def policy(self) -> Policy:
        return self.scheduler.policy

    # ------------------------------------------------------------------ arrival
    @staticmethod
    def _digest(key: str, uid: str) -> bytes:
        # a fixed-size digest: names and uids come from requests and may be of any length
        return hashlib.blake2b(f"{key}\0{uid}".encode(), digest_size=16).digest()

    def has_arrived(self, key: str, uid: str) -> bool:
        """Whether the policy was told of the pod ``key`` (of ``uid``) already."""
        return self._digest(key, uid) in self._seen

    def arrived(self, pod: PodRequest) -> None:
        """Tell the policy of the pod once (by key and uid), before it is scored: a learning policy
        (devshare's) learns the task mix from the pods that arrive. The extender also tells it of the
        pods it sees bound by others (pods asking no device, other schedulers' pods): the simulator's
        policy learns of every pod of the trace, and so does the live one."""
        seen = self._digest(pod.key, pod.uid)
        if seen in self._seen:
            return
        if len(self._seen) >= SEEN_LIMIT:
            del self._seen[next(iter(self._seen))]
        self._seen[seen] = None
        self.policy.observe(pod)

    # ------------------------------------------------------------------ assume
    def assume(self, pod: PodRequest, alloc: PodAllocation, *, now: float, ttl: float | None = None,
               expires_at: float | None = None, hold: str | None = None) -> None:
        """Hold ``alloc`` for ``pod`` until it is confirmed, forgotten or expired; all or nothing
        (:class:`~devshare.engine.state.Conflict` when it no longer fits). The deadline is
        ``expires_at`` when given, else ``now + ttl`` (``ttl`` defaults to the lifecycle's; ``math.inf``
        holds until forgotten). ``hold``: a group plan's hold for a member to come (the group key)."""
        if expires_at is None:
            t = self.ttl if ttl is None else ttl
            expires_at = math.inf if math.isinf(t) else now + t
        self.state.assume(pod, alloc, now=now, ttl=None, hold=hold)
        rec = self.state.pods[pod.key]
        rec.expires_at = None if math.isinf(expires_at) else expires_at

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
            state.bind(pod.key)
        else:
            reason = state.add_bound(pod, alloc)
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
        self.state.release(key)
        return True

    def release(self, key: str) -> None:
        """Give back whatever ``key`` holds, assumed or bound (a gang member gone, a plan dropped)."""
        self.state.release(key)

    # ------------------------------------------------------------------ expiry
    def expire(self, now: float) -> list[str]:
        """Release assumed allocations past their deadline whose bind is not in flight."""
        gone = [k for k, r in self.state.pods.items()
                if r.phase == "assumed" and r.expires_at is not None and r.expires_at <= now
                and k not in self._binding]
        for k in gone:
            self.state.release(k)
        return gone

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
