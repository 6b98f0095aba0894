"""Lease-based leader election (``coordination.k8s.io/v1`` Lease), as client-go does it.

A candidate reads the Lease; it takes it when nobody holds it, or when the holder's record has not
changed for ``lease_duration`` seconds *as observed locally* (no trust in other clocks). The leader
renews every ``retry_period``; it steps down at once when a renew hits a 409 (someone else wrote
the Lease), and when renewals keep failing for ``renew_deadline`` (shorter than the lease duration,
so it stops before anyone else may start). Only the leader binds pods.

Fencing: ``is_leader`` turns false only when the elector's own loop runs again. A leader that was
stopped (SIGSTOP, a long pause) past its lease still believes it leads when it resumes, and may
serve a bind already queued in its socket while another replica leads. So every write checks
:meth:`LeaderElector.fence` just before it is sent: the last successful renewal (the moment its
request was *sent*) must be less than ``renew_deadline`` ago, a margin below ``lease_duration``,
the time any other candidate waits, from when it saw the last renewal, before taking over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from devshare.kube.backend import Backend, meta
from devshare.kube.errors import BackendError, Conflict

log = logging.getLogger(__name__)


def micro_time(t: float | None = None) -> str:
    """A Kubernetes MicroTime: RFC 3339 with microseconds, UTC."""
    dt = datetime.fromtimestamp(time.time() if t is None else t, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        backend: Backend,
        *,
        identity: str,
        name: str = "devshare-extender",
        namespace: str | None = None,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_change: Callable[[bool], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("need retry_period < renew_deadline < lease_duration")
        self.backend = backend
        self.identity = identity
        self.name = name
        self.namespace = namespace or backend.namespace
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_change = on_change
        self.clock = clock
        self.leading = asyncio.Event()
        self.transitions = 0  # times this elector became leader
        self._observed: dict[str, Any] | None = None  # the holder's spec as last seen
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._lease: dict[str, Any] | None = None  # the Lease as last read or written

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    def lease_age(self) -> float:
        """Seconds since the last successful renewal was sent."""
        return self.clock() - self._last_renew

    def may_write(self) -> bool:
        """True while this elector leads and its lease surely has not expired for anyone else."""
        return self.is_leader and self.lease_age() < self.renew_deadline

    def fence(self) -> str | None:
        """None when a write may go out now; otherwise why not (for the refused request's answer)."""
        if not self.is_leader:
            return "not the leader"
        age = self.lease_age()
        if age >= self.renew_deadline:
            return (f"not the leader: its lease was last renewed {age:.1f} s ago, beyond the renew deadline of "
                    f"{self.renew_deadline:g} s, so another replica may lead now; nothing was written")
        return None

    def _set_leader(self, value: bool) -> None:
        if value == self.is_leader:
            return
        if value:
            self.transitions += 1
            self.leading.set()
            log.info("%s became the leader (lease %s/%s)", self.identity, self.namespace, self.name)
        else:
            self.leading.clear()
            log.warning("%s is no longer the leader", self.identity)
        if self.on_change is not None:
            self.on_change(value)

    def _spec(self, holder: str, *, acquire: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": holder,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": acquire,
            "renewTime": micro_time(),
            "leaseTransitions": transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this elector holds the Lease afterwards."""
        now = self.clock()
        lease = await self.backend.get_lease(self.namespace, self.name)
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(self.identity, acquire=micro_time(), transitions=0),
            }
            self._lease = await self.backend.create_lease(self.namespace, body)
            self._observed, self._observed_at = self._lease["spec"], now
            return True
        spec = dict(lease.get("spec") or {})
        if spec != self._observed:
            self._observed, self._observed_at = spec, now
        holder = spec.get("holderIdentity") or ""
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and self._observed_at + duration > now:
            return False  # someone else holds a live lease
        mine = holder == self.identity
        transitions = int(spec.get("leaseTransitions") or 0) + (0 if mine else 1)
        acquire = str(spec["acquireTime"]) if mine and spec.get("acquireTime") else micro_time()
        body = {**lease, "spec": {**spec, **self._spec(self.identity, acquire=acquire, transitions=transitions)}}
        self._lease = await self.backend.replace_lease(self.namespace, body)
        self._observed, self._observed_at = self._lease["spec"], now
        return True

    async def run(self) -> None:
        """Campaign forever: acquire, then renew; step down on 409 or after ``renew_deadline``."""
        try:
            while True:
                started = self.clock()  # a renewal holds from when it was sent, not when it came back
                try:
                    ok = await self.try_acquire_or_renew()
                except Conflict as e:
                    ok = False
                    if self.is_leader:
                        log.warning("lease %s/%s was taken over: %s", self.namespace, self.name, e)
                        self._set_leader(False)
                except BackendError as e:
                    ok = False
                    log.info("lease %s/%s: request failed: %s", self.namespace, self.name, e)
                now = self.clock()
                if ok:
                    self._last_renew = started
                    self._set_leader(True)
                elif self.is_leader and (now - self._last_renew >= self.renew_deadline
                                         or not self._holds_observed()):
                    self._set_leader(False)
                await asyncio.sleep(self.retry_period)
        finally:
            self._set_leader(False)

    def _holds_observed(self) -> bool:
        return bool(self._observed) and (self._observed or {}).get("holderIdentity") == self.identity

    async def release(self) -> None:
        """Give the Lease up (on shutdown) so that another candidate takes over without waiting."""
        self._set_leader(False)
        if self._lease is None or (self._lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        spec = dict(self._lease.get("spec") or {})
        spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=micro_time())
        with contextlib.suppress(BackendError):
            await self.backend.replace_lease(self.namespace, {**self._lease, "spec": spec,
                                                              "metadata": meta(self._lease)})
