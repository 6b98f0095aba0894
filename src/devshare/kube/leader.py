"""Leadership from a ``coordination.k8s.io/v1`` Lease: :class:`LeaderElector` campaigns for its own
Lease as client-go does it; :class:`LeaseFollower` follows the Lease of the kube-scheduler in the same
pod (the deployment's default: docs/deploy.md, "Several replicas").

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

from devshare.kube.backend import Backend
from devshare.kube.errors import BackendError, Conflict
from devshare.model.kubeobjects import meta

log = logging.getLogger(__name__)


def lease_seconds(spec: dict[str, Any]) -> tuple[float | None, str]:
    """A Lease's ``leaseDurationSeconds``, or None and what is wrong with it: missing, not a number,
    or not above 0 (never read as a default: a Lease that says 0 is a broken Lease, not a 15 s one)."""
    raw = spec.get("leaseDurationSeconds")
    if raw is None:
        return None, "has no leaseDurationSeconds"
    if isinstance(raw, bool) or not isinstance(raw, int | float) or raw <= 0:
        return None, f"has leaseDurationSeconds {raw!r}, which is not a positive number of seconds"
    return float(raw), ""


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
        self.last_error = ""  # why the last renewal failed ("" after one that succeeded)
        self.stepped_down = ""  # why this elector last stopped leading (logged too)
        self._said = ""  # what is wrong with the Lease as last logged (once per change)

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

    def _set_leader(self, value: bool, why: str = "") -> None:
        if value == self.is_leader:
            return
        if value:
            self.transitions += 1
            self.leading.set()
            log.info("%s became the leader (lease %s/%s)", self.identity, self.namespace, self.name)
        else:
            self.leading.clear()
            self.stepped_down = why or "it stopped"
            log.warning("%s is no longer the leader of lease %s/%s: %s", self.identity, self.namespace, self.name,
                        self.stepped_down)
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
        duration, wrong = lease_seconds(spec)
        if duration is None:
            duration = self.lease_duration
        if wrong and holder and holder != self.identity and wrong != self._said:
            log.warning("lease %s/%s, held by %s, %s: this elector waits its own lease duration (%g s) from when it "
                        "saw the holder's last change before taking it over", self.namespace, self.name, holder,
                        wrong, self.lease_duration)
        self._said = wrong
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
                    if not ok:
                        self.last_error = "another holder's lease is live"
                except Conflict as e:
                    ok = False
                    self.last_error = f"a renewal met a conflict (another writer changed the Lease): {e}"
                    self._set_leader(False, self.last_error)
                except BackendError as e:
                    ok = False
                    self.last_error = f"{type(e).__name__}: {e}"
                    log.info("lease %s/%s: request failed: %s", self.namespace, self.name, e)
                now = self.clock()
                if ok:
                    if self.is_leader and now - self._last_renew >= self.renew_deadline:
                        # the fence (may_write) refused every write meanwhile, though nothing stepped down
                        log.warning("lease %s/%s: renewed after %.1f s without a renewal (this attempt took %.1f s; "
                                    "the renew deadline is %g s): writes were refused meanwhile", self.namespace,
                                    self.name, now - self._last_renew, now - started, self.renew_deadline)
                    self._last_renew = started
                    self.last_error = ""
                    self._set_leader(True)
                elif self.is_leader and now - self._last_renew >= self.renew_deadline:
                    self._set_leader(False, f"no renewal succeeded for {now - self._last_renew:.1f} s (the renew "
                                            f"deadline is {self.renew_deadline:g} s); the last attempt: "
                                            f"{self.last_error}")
                elif self.is_leader and not self._holds_observed():
                    holder = (self._observed or {}).get("holderIdentity") or "nobody"
                    self._set_leader(False, f"the Lease shows {holder} as its holder")
                await asyncio.sleep(self.retry_period)
        finally:
            self._set_leader(False, "its election stopped")

    def _holds_observed(self) -> bool:
        return bool(self._observed) and (self._observed or {}).get("holderIdentity") == self.identity

    async def release(self) -> None:
        """Give the Lease up (on shutdown) so that another candidate takes over without waiting."""
        self._set_leader(False, "it released the Lease")
        if self._lease is None or (self._lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        spec = dict(self._lease.get("spec") or {})
        spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=micro_time())
        with contextlib.suppress(BackendError):
            await self.backend.replace_lease(self.namespace, {**self._lease, "spec": spec,
                                                              "metadata": meta(self._lease)})

    async def check(self) -> str | None:
        """The fence before a write (:meth:`fence`; this elector writes the Lease itself, so what it
        knows locally is current)."""
        return self.fence()


def parse_micro_time(value: object) -> float | None:
    """Seconds since the epoch of a Kubernetes MicroTime/Time (RFC 3339), or None when unreadable."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip().replace("Z", "+00:00")
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def pod_hostname(pod_name: str) -> str:
    """The hostname the kubelet gives a pod's containers: its name, cut to 63 characters (a DNS
    label) and without a trailing ``-`` or ``.`` (pkg/kubelet, GeneratePodHostNameAndDomain)."""
    return pod_name[:63].rstrip("-.") if len(pod_name) > 63 else pod_name


class LeaseFollower:
    """Leadership borrowed from the kube-scheduler beside this extender (the same pod): this
    extender leads exactly while its own kube-scheduler holds the kube-scheduler Lease.

    kube-scheduler's identity in the Lease is ``<hostname>_<uuid>`` and a pod's hostname is its name
    (:func:`pod_hostname`), which the extender learns from the downward API (``--pod-name``). So the
    active kube-scheduler always has an extender that binds (it talks only to its sidecar), and no
    other extender does. The follower never writes the Lease.

    Fencing: the Lease's ``renewTime`` is written by the kube-scheduler of the same pod, so with the
    same clock as this process: a write may go out only while the holder is this pod's
    kube-scheduler and its last renewal is less than ``deadline`` seconds old (default two thirds
    of the Lease's ``leaseDurationSeconds``; any other candidate waits the whole duration, counted
    from when it saw that renewal, before it takes over). A renewTime in the future (a forged Lease,
    a clock set back) is aged from when this process first read it, so it goes stale as any other;
    a Lease whose ``leaseDurationSeconds`` is missing or not above 0 lets nothing be written (one
    log line says so). :meth:`check`, right before each bind's
    write, judges from the Lease as read at most ``retry_period`` ago when that read let this
    extender write, and reads it afresh otherwise; :meth:`may_write` judges from the last read
    (every ``retry_period``) with the clock of now.

    Why a read up to ``retry_period`` old is enough: it showed this pod's kube-scheduler holding the
    Lease with a renewal younger than the deadline, and no other kube-scheduler can take a Lease
    before its whole duration has passed since that renewal. Only a release hands it over sooner,
    and kube-scheduler releases it as it stops: a bind of its still on its way here may then meet
    the next leader's writes, which the claim ledger (:mod:`devshare.kube.ledger`) keeps from
    over-booking a card, as it does for every two writers at once. So a bind does not cost a read
    of the Lease while binds come faster than one a ``retry_period``.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        pod_name: str,
        name: str = "devshare-scheduler",
        namespace: str | None = None,
        retry_period: float = 1.0,
        deadline_fraction: float = 2 / 3,
        on_change: Callable[[bool], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not pod_name:
            raise ValueError("the follower needs its pod's name (--pod-name, from the downward API)")
        if not 0 < deadline_fraction < 1:
            raise ValueError("deadline_fraction must be between 0 and 1")
        self.backend = backend
        self.pod_name = pod_name
        self.prefix = pod_hostname(pod_name) + "_"
        self.identity = pod_name
        self.name = name
        self.namespace = namespace or backend.namespace
        self.retry_period = retry_period
        self.deadline_fraction = deadline_fraction
        self.on_change = on_change
        self.clock = clock
        self.leading = asyncio.Event()
        self.transitions = 0
        self.holder = ""  # the Lease's holder as last read
        self._renewed: float | None = None  # its renewTime (epoch seconds) as last read
        self._first_seen = 0.0  # when this process first read that renewTime (its own clock)
        self._duration: float | None = None  # its leaseDurationSeconds (None: missing or not above 0)
        self._wrong = ""  # what is wrong with the Lease's leaseDurationSeconds ("": nothing)
        self._read_at: float | None = None  # when the Lease was last read (this process's clock)
        self.reads = 0  # Lease reads made (the follow loop's and check's)
        self._reading: asyncio.Future[dict[str, Any] | None] | None = None  # the read in flight, shared

    @property
    def is_leader(self) -> bool:
        return self.leading.is_set()

    def _mine(self, holder: str) -> bool:
        return holder.startswith(self.prefix)

    async def _read(self) -> None:
        """Read the Lease; callers that come while a read is in flight share it (BackendError: the
        read failed)."""
        if self._reading is None:
            self.reads += 1
            reading = self._reading = asyncio.ensure_future(self.backend.get_lease(self.namespace, self.name))
            reading.add_done_callback(lambda _: setattr(self, "_reading", None))
        lease = await asyncio.shield(self._reading)  # one caller cancelled does not cancel the others' read
        self._observe(lease)

    def _observe(self, lease: dict[str, Any] | None) -> None:
        now = self._read_at = self.clock()
        spec = (lease or {}).get("spec") or {}
        self.holder = str(spec.get("holderIdentity") or "")
        renewed = parse_micro_time(spec.get("renewTime"))
        if renewed != self._renewed:
            self._renewed, self._first_seen = renewed, now
        self._duration, wrong = lease_seconds(spec)
        if wrong != self._wrong and lease is not None:
            if wrong:
                log.warning("the kube-scheduler Lease %s/%s %s: this extender does not bind while it does (set "
                            "kube-scheduler's leaderElection.leaseDuration)", self.namespace, self.name, wrong)
            self._wrong = wrong

    def _why_not(self) -> str | None:
        """None when the last read Lease lets this extender write now; otherwise why not."""
        if not self._mine(self.holder):
            who = self.holder or "nobody"
            return (f"not the leader: the kube-scheduler Lease {self.namespace}/{self.name} is held by {who}, "
                    f"not by this pod's kube-scheduler ({self.prefix}...)")
        if self._renewed is None:
            return f"not the leader: the kube-scheduler Lease {self.namespace}/{self.name} has no renewTime"
        if self._duration is None:
            return (f"not the leader: the kube-scheduler Lease {self.namespace}/{self.name} {self._wrong}; "
                    "nothing was written")
        # a renewTime ahead of this clock (a forged Lease, or a clock that jumped back) counts from when
        # this process first saw it: it goes stale all the same
        age = self.clock() - min(self._renewed, self._first_seen)
        deadline = self.deadline_fraction * self._duration
        if age >= deadline:
            return (f"not the leader: this pod's kube-scheduler last renewed its Lease {age:.1f} s ago, beyond "
                    f"{deadline:.1f} s of its {self._duration:g} s lease, so another replica may lead now; "
                    "nothing was written")
        return None

    def may_write(self) -> bool:
        return self._why_not() is None

    def fence(self) -> str | None:
        return self._why_not()

    async def check(self) -> str | None:
        """The fence just before a write: from the last read when it is at most ``retry_period`` old
        and let this extender write (see the class's doc), otherwise from the Lease read afresh."""
        if self._read_at is not None and 0 <= self.clock() - self._read_at <= self.retry_period:
            why = self._why_not()
            if why is None:
                return None
        try:
            await self._read()
        except BackendError as e:
            return f"not the leader: the kube-scheduler Lease could not be read ({e}); nothing was written"
        why = self._why_not()
        self._set_leader(why is None)
        return why

    def _set_leader(self, value: bool) -> None:
        if value == self.is_leader:
            return
        if value:
            self.transitions += 1
            self.leading.set()
            log.info("%s leads: its kube-scheduler holds the Lease %s/%s", self.pod_name, self.namespace, self.name)
        else:
            self.leading.clear()
            log.warning("%s no longer leads (Lease %s/%s held by %s)", self.pod_name, self.namespace, self.name,
                        self.holder or "nobody")
        if self.on_change is not None:
            self.on_change(value)

    async def run(self) -> None:
        """Follow the Lease forever (a read every ``retry_period``)."""
        try:
            while True:
                try:
                    await self._read()
                    self._set_leader(self._why_not() is None)
                except BackendError as e:
                    log.info("lease %s/%s: read failed: %s", self.namespace, self.name, e)
                    self._set_leader(self.may_write())
                await asyncio.sleep(self.retry_period)
        finally:
            self._set_leader(False)

    async def release(self) -> None:
        """Nothing to give up: the Lease is kube-scheduler's."""
        self._set_leader(False)
