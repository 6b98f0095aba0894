"""Claims before Bindings: what makes two extenders binding at the same moment unable to over-book a
card (issue 12; docs/deploy.md, "Several replicas").

Before a pod's Binding is sent, its allocation is recorded as a *claim* in the claim ledger
(:mod:`devshare.kube.ledger`: one ConfigMap that every replica writes), by a compare-and-swap on the
ledger's resourceVersion. The write is decided here:

- the claims already in the ledger are *absorbed* into the nodes' usage (a claim the state does not
  hold yet is recorded as a bound allocation: the ledger is the truth about what other replicas
  bind), then the pod's allocation is checked against that usage by the engine's own rule
  (:meth:`ClusterState.why_not`, from :mod:`devshare.engine.admit`). It does not fit: the bind is
  refused, nothing is written for it;
- it fits: the ledger is written with the pod's claim added, at the version read. A 409 means
  another replica wrote first: the ledger is read again, absorbed, checked, and written again
  (or the bind refused). So of two replicas binding conflicting pods to one card, the second to
  write sees the first's claim and refuses;
- claims that come while a write is on its way wait for it and go out together, in the next write
  (group commit): a busy extender writes the ledger a few times a second, not once per bind;
- a claim stays only while its bind is in flight. A write drops the claims of pods this replica's
  watch of pods has seen end (deleted, finished) or *bound*. The ledger's **watermark** is the
  highest resourceVersion at which a claim dropped as bound was seen bound; a replica decides over
  the ledger only once its own watch of pods has reached the watermark (it waits a moment, or
  refuses the bind), so every binding whose claim is gone from the ledger is in its state;
- a pod claimed by another replica (a bind of the same pod in flight there) is not claimed again, nor
  is a pod this replica's watch has shown bound (its claim may have left the ledger already).

Only then the Binding goes out. A Binding that failed withdraws its claim (best effort); when its
outcome is unknown (the connection broke), the pod is written to first, as below, and a pod found
bound with the claim's allocation keeps its claim. Claims of pods that never bind are released by the
leader's sweep (:mod:`devshare.server.extender.claimsweep`) once older than ``ttl``, after the pod is
written to: every Binding carries the resourceVersion of a read of the pod made *before* its claim
was written (:class:`~devshare.server.extender.binding.Binder`), so a late one then fails.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from devshare.engine.caches import LRU
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.watched import is_bound
from devshare.kube.errors import BackendError, Conflict
from devshare.kube.informer import Backoff
from devshare.kube.ledger import SIZE_LIMIT, Claim, ClaimLedger, Ledger, encode_claim, encoded_size
from devshare.model.allocation import PodAllocation
from devshare.model.kubeobjects import meta
from devshare.model.request import PodRequest
from devshare.server.extender.view import ClusterView
from devshare.server.extender.watermark import CATCH_UP, Behind, caught_up, reached, version_number

log = logging.getLogger(__name__)

ATTEMPTS = 16  # compare-and-swap rounds before a bind gives up (each lost round: another replica wrote)
STUB_RECHECK = 30.0  # seconds after which a claim not yet seen bound by the watch is read again
BOUND_KEPT = 16384  # pods seen bound that are remembered (their claims leave the ledger at the next write)
# seconds a write waits for more claims to join it: each write costs the API server and etcd a few ms of
# CPU, so at 70 binds a second waiting 50 ms makes one write per 5-6 binds (BENCHMARKS.md)
LINGER = 0.05

NO_FIT = "does not fit on node"
Queued = tuple[PodRequest, PodAllocation, "asyncio.Future[str | None]"]  # a claim waiting for the next write


class Contended(Exception):
    """A ledger write lost its compare-and-swap :data:`ATTEMPTS` times in a row."""


@dataclass
class ClaimCounters:
    writes: int = 0  # ledger writes that went through (claims, withdrawals, prunings)
    conflicts: int = 0  # writes answered 409 (another replica wrote first): read again
    refused: int = 0  # binds refused because the ledger holds claims the pod does not fit beside
    withdrawn: int = 0  # claims removed after their Binding failed
    pruned: int = 0  # claims of pods bound, gone, finished or never bound, removed
    absorbed: int = 0  # claims of other replicas recorded in the state
    waited: int = 0  # writes that first waited for this replica's watch to reach the watermark


def replica_identity(name: str) -> str:
    """This extender's name in the claims it writes: its pod (or host-pid) and a random suffix, so
    that two processes never share one."""
    return f"{name}/{uuid.uuid4().hex[:6]}"


class Claims:
    """The ledger writes of one extender, over its lifecycle's state. ``cluster``: how far this replica's
    watch of pods has come, the bound pods of a node it delivered but the state does not count (a
    claim's check counts them, since their own claims may be gone), and where a pod read from the API
    server is applied."""

    def __init__(
        self,
        ledger: ClaimLedger,
        lifecycle: Lifecycle,
        cluster: ClusterView,
        *,
        identity: str,
        ttl: float = 60.0,
        linger: float = LINGER,
        catch_up: float = CATCH_UP,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger = ledger
        self.lifecycle = lifecycle
        self.state = lifecycle.state
        self.cluster = cluster
        self.identity = identity
        self.ttl = ttl
        self.linger = linger  # seconds a write waits for more claims to join it
        self.catch_up = catch_up  # seconds a write waits for the watch to reach the ledger's watermark
        self.clock = clock
        self.current: Ledger | None = None  # the ledger as last read or written (None: read it first)
        self.read_at = 0.0  # when it was last read or written (this replica's clock)
        self.unreadable: str | None = None  # why the ledger as last read cannot be used (None: it can)
        # each claim in the ledger and when this replica first saw it: claims age by the reader's clock
        self.first_seen: dict[Claim, float] = {}
        # pods recorded in the state from another replica's claim alone (not yet seen bound by the
        # watch): the request standing for the pod, and when the claim was last read
        self.stubs: dict[str, tuple[PodRequest, float]] = {}
        # pods the watch has shown bound lately: key -> (uid, node, resourceVersion of that event)
        self.bound_at: LRU[str, tuple[str, str, int]] = LRU(BOUND_KEPT)
        self.counters = ClaimCounters()
        self.lock = asyncio.Lock()
        self._queued: list[Queued] = []  # claims waiting for the next write
        self._writer: asyncio.Task[None] | None = None  # the task writing the claims now

    # ------------------------------------------------------------------ the bind path
    async def claim(self, pod: PodRequest, alloc: PodAllocation) -> str | None:
        """Record ``pod``'s claim on ``alloc`` in the ledger; None when written (the Binding may go
        out), otherwise why not (the bind is refused; nothing was written for it).

        Claims are written one write at a time: a write waits ``linger`` seconds for more claims to
        join it, and those that come while it is on its way go out together in the next one."""
        done: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._queued.append((pod, alloc, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(), name="devshare-claims")
        return await asyncio.shield(done)

    async def _drain(self) -> None:
        """Write the queued claims, a batch per write, until none is left."""
        while self._queued:
            await asyncio.sleep(self.linger)  # the claims of the next moments join this write
            batch, self._queued = self._queued, []
            try:
                answers = await self._write_batch(batch)
            except Exception as e:  # never leave a bind waiting: each gets the reason
                log.exception("writing the claim ledger failed unexpectedly")
                answers = [f"pod {p.key}: recording its claim failed ({type(e).__name__}: {e}); nothing was bound"
                           for p, _, _ in batch]
            for (_, _, done), answer in zip(batch, answers, strict=True):
                if not done.done():
                    done.set_result(answer)

    async def _write_batch(self, batch: list[Queued]) -> list[str | None]:
        """One compare-and-swap write of ``batch``'s claims (retried on 409): per claim, None when
        written, otherwise why not."""
        async with self.lock:
            decided: list[tuple[list[str | None], int]] = []

            def change(ledger: Ledger) -> tuple[dict[str, Claim], str] | None:
                claims, watermark, answers, pruned = self.decide(ledger, batch)
                decided[:] = [(answers, pruned)]
                return None if all(answers) else (claims, watermark)  # every claim refused: nothing to write

            where = self.ledger.where
            try:
                written = await self.swap(change)
            except Contended:
                self.current = None
                return [f"pod {p.key}: the claim ledger ({where}) changed {ATTEMPTS} times while devshare "
                        "tried to record the pod's claim; nothing was bound" for p, _, _ in batch]
            except Behind as e:
                self.current = None
                return [f"pod {p.key}: {e}; nothing was bound" for p, _, _ in batch]
            except BackendError as e:
                self.current = None  # the write may have happened: read the ledger afresh next time
                return [f"pod {p.key}: recording its claim in the claim ledger ({where}) failed: {e}; "
                        "nothing was bound" for p, _, _ in batch]
            answers, pruned = decided[0]
            self.counters.refused += sum(1 for a in answers if a and NO_FIT in a)
            if written is not None:
                self.counters.pruned += pruned
            else:
                self.current = None  # refused, nothing written: the next write reads the ledger afresh (repaired?)
            return answers

    async def swap(self, change: Callable[[Ledger], tuple[dict[str, Claim], str] | None]) -> Ledger | None:
        """The one compare-and-swap loop of every ledger write: once this replica's watch has reached
        the ledger's watermark, write ``change(ledger)`` (claims and watermark; None: nothing to
        write) at the version it was read; after a 409 (another replica wrote first) read the ledger
        again and ask ``change`` again. Returns the ledger written, or None when nothing was. Raises
        :class:`Contended` after ``ATTEMPTS`` lost rounds, :class:`Behind`, and the backend's errors as
        they come. The caller holds the lock."""
        ledger = self.current if self.current is not None else await self.read()
        for _ in range(ATTEMPTS):
            want = version_number(ledger.watermark)
            if want is not None and not reached(self.cluster, want):
                self.counters.waited += 1
                await caught_up(self.cluster, ledger.watermark, self.catch_up, self.ledger.where)
            out = change(ledger)  # no await between the wait and the decision
            if out is None:
                return None
            try:
                written = await self.ledger.write(ledger, *out)
            except Conflict:
                self.counters.conflicts += 1
                ledger = await self.read()
                continue
            self.counters.writes += 1
            self._adopt(written)
            return written
        raise Contended(f"the claim ledger changed {ATTEMPTS} times in a row")

    def decide(self, ledger: Ledger, batch: list[Queued]) -> tuple[dict[str, Claim], str, list[str | None], int]:
        """The claims and watermark to write for ``batch`` over ``ledger``, the answer of each of its
        pods (None: its claim is in) and how many claims were pruned: each pod decided in turn as if
        it were claimed alone over the claims decided before it. Synchronous: no other engine call
        between the absorptions, the checks and the claims returned."""
        if ledger.error is not None:
            why = (f"the claim ledger ({self.ledger.where}) cannot be read: {ledger.error}; devshare binds "
                   "nothing until it is repaired or deleted")
            return dict(ledger.claims), ledger.watermark, [why] * len(batch), 0
        claims: dict[str, Claim] = {}
        watermark = version_number(ledger.watermark) or 0
        for k, c in ledger.claims.items():
            seen = self.seen_bound(c)
            if seen is not None:
                watermark = max(watermark, seen)
            elif not self.gone(c):
                claims[k] = c
        pruned = len(ledger.claims) - len(claims)
        unreflected = self._absorb(claims.values())  # each pod's check skips the claims under its own name
        size = [encoded_size(claims)]
        answers = [self._decide_one(claims, unreflected, size, pod, alloc) for pod, alloc, _ in batch]
        return claims, str(watermark) if watermark else ledger.watermark, answers, pruned

    def _decide_one(self, claims: dict[str, Claim], unreflected: list[Claim], size: list[int], pod: PodRequest,
                    alloc: PodAllocation) -> str | None:
        """Add ``pod``'s claim to ``claims`` (None) when it fits beside every other claim there
        (``unreflected``: those the state does not count) and everything the state holds; otherwise
        leave ``claims`` as they are and say why not."""
        node = alloc.node
        seen = self.bound_at.get(pod.key)
        if seen is not None and (not pod.uid or not seen[0] or seen[0] == pod.uid):
            # bound already (by another replica, its claim since dropped): a claim now would name devices
            # the pod does not hold, and its Binding can only fail
            return (f"pod {pod.key} is bound already (to node {seen[1]}, as this replica's watch shows); "
                    "nothing was bound")
        held = claims.get(pod.key)
        if held is not None and held.by != self.identity:
            # another replica's claim under this name (this pod's, or one of an earlier pod of the name
            # whose end the watch has not shown yet): never overwritten
            return (f"pod {pod.key} is being bound by another devshare replica ({held.by} claimed devices of node "
                    f"{held.node} for it {self.age(held, self.clock()):.0f} s ago); a claim whose pod never binds "
                    f"is released after {self.ttl:g} s")
        reason = self._check(pod, alloc, [c for c in unreflected if c.node == node and c.pod != pod.key])
        if reason is not None:
            return (f"pod {pod.key} {NO_FIT} {node} beside the claims in the claim ledger (another devshare "
                    f"replica may have bound a pod to these devices first): {reason}")
        claim = Claim(pod=pod.key, uid=pod.uid, by=self.identity, at=self.clock(), allocation=alloc,
                      priority=pod.priority)
        grown = size[0] + len(encode_claim(claim)) + (1 if claims else 0)
        if grown > SIZE_LIMIT:
            return (f"pod {pod.key}: the claim ledger ({self.ledger.where}) is full ({len(claims)} binds in flight); "
                    "kube-scheduler retries the pod once some of them are bound")
        size[0] = grown
        claims[pod.key] = claim
        return None

    def age(self, c: Claim, now: float) -> float:
        """How long ``c`` has been in the ledger by this replica's clock: since this replica first saw it
        (read or wrote it). Its ``at`` is the writer's clock, which may run ahead or behind: never used
        to age it (a claim dated in the future is as young as one seen now)."""
        return max(0.0, now - self.first_seen.get(c, now))

    def gone(self, c: Claim) -> bool:
        """The claim's pod is surely gone or finished: the watch has seen it end (never a guess: a pod
        the watch does not know, or knows under another uid, may just have been created)."""
        return self.state.is_finished(c.pod, c.uid)

    def seen_bound(self, c: Claim) -> int | None:
        """The resourceVersion at which the watch showed the claim's pod bound to the claim's node (None:
        not seen so). The Binding that follows a claim carries its annotations, so from then on the pod
        itself holds the devices in every replica's watch."""
        seen = self.bound_at.get(c.pod)
        if seen is None or seen[1] != c.node or (c.uid and seen[0] != c.uid):
            return None
        return seen[2]

    def _reflected(self, c: Claim) -> bool:
        rec = self.state.pods.get(c.pod)
        return (rec is not None and rec.allocation == c.allocation
                and (not rec.pod.uid or not c.uid or rec.pod.uid == c.uid))

    def _absorb(self, claims: Iterable[Claim]) -> list[Claim]:
        """Record in the state every claim of another replica it does not hold yet (as a bound
        allocation, even beyond a card's capacity: other replicas' claims are what they bind).
        Returns the claims not recorded: this replica's own whose pod the state no longer holds so
        (a Binding whose outcome is unknown: the pod's own records are the scheduler's to keep), and
        those of pods the state holds something else for. :meth:`_check` counts them all the same."""
        unreflected: list[Claim] = []
        held_back: dict[str, set[str]] = {}  # by node: pods the watch showed bound that the state holds back
        for c in claims:
            if self._reflected(c):
                continue
            if c.node not in held_back:
                held_back[c.node] = {p.key for p, _ in self.cluster.uncounted(c.node)}
            if c.pod in held_back[c.node]:
                continue  # the watch's object is its truth, counted by :meth:`_check`; a record made
                # from its claim would be dropped with the claim, the bound pod then counted nowhere
            if c.by == self.identity or c.pod in self.state.pods:
                unreflected.append(c)
                continue
            ns, _, name = c.pod.partition("/")
            stub = PodRequest(namespace=ns, name=name, uid=c.uid, priority=c.priority)
            self.lifecycle.add_watched(stub, c.allocation, checked=False)
            self.stubs[c.pod] = (stub, self.clock())
            self.counters.absorbed += 1
        return unreflected

    def _check(self, pod: PodRequest, alloc: PodAllocation, unreflected: list[Claim]) -> str | None:
        """Why ``alloc`` does not fit beside everything its node holds, ``unreflected`` (claims on that
        node) and the pods the watch has shown bound there that the state does not count (None: it fits)."""
        uncounted = [(p, a) for p, a in self.cluster.uncounted(alloc.node) if p.key != pod.key]
        if not unreflected and not uncounted:
            return self.state.why_not(pod, alloc, ignore=pod.key)
        what_if = self.lifecycle.what_if([alloc.node])
        for c in unreflected:
            ns, _, name = c.pod.partition("/")
            what_if.add(PodRequest(namespace=ns, name=f"{name} (claim)", uid=c.uid), c.allocation)
        for p, a in uncounted:
            what_if.add(PodRequest(namespace=p.namespace, name=f"{p.name} (bound)", uid=p.uid), a)
        return what_if.state.why_not(pod, alloc, ignore=pod.key)

    async def withdraw(self, pod: PodRequest, alloc: PodAllocation, *, unsure: bool = False) -> None:
        """Remove this replica's claim for ``pod`` (its Binding failed). ``unsure``: the Binding's
        outcome is unknown (the connection broke): the pod is written to first, so that the Binding
        can no longer land, and a pod found bound keeps its claim. Best effort: a claim left behind
        is released by :meth:`sweep` once its pod is gone or after ``ttl``."""
        if unsure:
            held = (self.current or Ledger()).claims.get(pod.key)
            if held is None or held.by != self.identity or not await self.ledger.expire(held, now=self.clock()):
                return

        def change(ledger: Ledger) -> tuple[dict[str, Claim], str] | None:
            c = ledger.claims.get(pod.key)
            if c is None or c.by != self.identity or c.uid != pod.uid or c.allocation != alloc:
                return None  # not this replica's claim for this very bind (any more)
            return {k: v for k, v in ledger.claims.items() if k != pod.key}, ledger.watermark

        async with self.lock:
            try:
                if await self.swap(change) is not None:
                    self.counters.withdrawn += 1
            except (BackendError, Contended, Behind) as e:
                if isinstance(e, BackendError):
                    self.current = None
                log.info("the claim of pod %s on node %s could not be withdrawn (%s); it is released once the pod "
                         "is gone or after %g s", pod.key, alloc.node, e, self.ttl)

    # ------------------------------------------------------------------ reading
    async def read(self) -> Ledger:
        ledger = await self.ledger.read()
        self._adopt(ledger)
        return ledger

    def _adopt(self, ledger: Ledger) -> None:
        """The ledger as just read or written: kept, its claims absorbed, and the state's records made
        from claims no longer in it released (withdrawn: their Binding failed; expired; or dropped as
        bound, which a decision waits for the watch to show: :func:`~devshare.server.extender.watermark.caught_up`)."""
        if ledger.error != self.unreadable:  # said once per change
            if ledger.error is not None:
                log.warning("the claim ledger (%s) cannot be read: %s; binds are refused until it is repaired or "
                            "deleted", self.ledger.where, ledger.error)
            else:
                log.warning("the claim ledger (%s) can be read again: binds go on", self.ledger.where)
            self.unreadable = ledger.error
        self.current = ledger
        now = self.read_at = self.clock()
        self.first_seen = {c: self.first_seen.get(c, now) for c in ledger.claims.values()}
        for key, (stub, _) in list(self.stubs.items()):
            rec = self.state.pods.get(key)
            if rec is None or rec.pod is not stub:
                del self.stubs[key]
            elif key in ledger.claims:
                self.stubs[key] = (stub, self.clock())  # still claimed: read again later
            else:
                self.lifecycle.release(key)
                del self.stubs[key]
        if ledger.error is None:
            self._absorb(c for c in ledger.claims.values() if not self.gone(c))

    async def load(self) -> None:
        """Read the ledger (at start and after each re-list of pods, before the state is used),
        retrying until it works: the state then counts the claims of binds still in flight."""
        backoff = Backoff()
        while True:
            try:
                ledger = await self.ledger.read()
                break
            except BackendError as e:
                delay = backoff.next_delay()
                hint = " (does the extender's Role allow get on configmaps?)" if e.code == 403 else ""
                log.warning("reading the claim ledger failed%s: %s; retrying in %.1fs", hint, e, delay)
                await asyncio.sleep(delay)
        self._adopt(ledger)

    # ------------------------------------------------------------------ the watch
    def pod_changed(self, type_: str, obj: dict[str, Any]) -> None:
        """A pod event from the watch (after the state applied it): a pod seen bound is remembered
        with the event's resourceVersion (its claim may then go, :meth:`decide`); a pod recorded from
        a claim alone, now seen bound, is recorded as the watch has it."""
        m = meta(obj)
        key = f"{m.get('namespace')}/{m.get('name')}"
        bound = type_ != "DELETED" and is_bound(obj)
        node = (obj.get("spec") or {}).get("nodeName")
        rv = version_number(str(m.get("resourceVersion") or ""))
        if bound and rv is not None:
            uid = str(m.get("uid") or "")
            seen = self.bound_at.get(key)
            if seen is None or seen[0] != uid:  # the first event that showed this pod bound
                self.bound_at.put(key, (uid, str(node), rv))
        else:
            self.bound_at.pop(key, None)
        held = self.stubs.get(key)
        if held is None:
            return
        rec = self.state.pods.get(key)
        if rec is None or rec.pod is not held[0]:
            del self.stubs[key]
            return
        if bound:
            del self.stubs[key]
            self.lifecycle.release(key)
            self.cluster.note_pod(dict(obj))
