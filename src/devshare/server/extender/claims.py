"""Claims before Bindings: what makes two extenders binding at the same moment unable to over-book a
card (issue 12; docs/deploy.md, "Several replicas").

Before a pod's Binding is sent, its allocation is recorded as a *claim* in its node's ledger
(:mod:`devshare.kube.ledger`: one ConfigMap per node that every replica writes), by a
compare-and-swap on the ledger's resourceVersion. The write is decided here:

- the claims already in the ledger are *absorbed* into the node's usage (a claim the state does not
  hold yet is recorded as a bound allocation: the ledger is the truth about what other replicas
  bind), then the pod's allocation is checked against that usage by the engine's own rule
  (:meth:`ClusterState.why_not`, from :mod:`devshare.engine.admit`). It does not fit: the bind is
  refused, nothing is written;
- it fits: the ledger is written with the pod's claim added, at the version read. A 409 means
  another replica wrote first: the ledger is read again, absorbed, checked, and written again
  (or the bind refused). So of two replicas binding conflicting pods to one card, the second to
  write sees the first's claim and refuses;
- claims of pods the watch has seen gone or finished are pruned in the same write;
- a pod claimed by another replica (a bind of the same pod in flight there) is not claimed again.

Only then the Binding goes out. A Binding that failed withdraws its claim (best effort); when its
outcome is unknown (the connection broke), the pod is written to first, as below, and a pod found
bound keeps its claim. Claims of pods that never bind are
released by the leader's :meth:`Claims.sweep` once older than ``ttl``: it first writes an
annotation on the pod (``devshare.io/claim-expired``), which changes the pod's resourceVersion, so
that a Binding still on its way from the claim's writer (sent with the resourceVersion read before
the claim) fails, then removes the claim. A pod bound meanwhile keeps it.

Every Binding carries the resourceVersion of a read of the pod made *before* its claim was written
(:class:`~devshare.server.extender.writes.PodWrites`): that is what makes the expiry above safe.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from devshare.engine.state import ClusterState
from devshare.kube.backend import meta
from devshare.kube.errors import BackendError, Conflict, NotFound
from devshare.kube.leader import micro_time
from devshare.kube.ledger import Claim, ClaimLedger, NodeLedger
from devshare.kube.sync import TERMINAL_PHASES, Backoff
from devshare.model.allocation import PodAllocation
from devshare.model.request import PodRequest

log = logging.getLogger(__name__)

EXPIRED_ANNOTATION = "devshare.io/claim-expired"  # written on a pod whose stale claim is released
ATTEMPTS = 16  # compare-and-swap rounds before a bind gives up (each lost round: another replica wrote)
STUB_RECHECK = 30.0  # seconds after which a claim not yet seen bound by the watch is read again


NO_FIT = "does not fit on node"
Queued = tuple[PodRequest, PodAllocation, "asyncio.Future[str | None]"]  # a claim waiting for its node's write


class Contended(Exception):
    """A ledger write lost its compare-and-swap :data:`ATTEMPTS` times in a row."""


@dataclass
class ClaimCounters:
    writes: int = 0  # ledger writes that went through (claims, withdrawals, prunings)
    conflicts: int = 0  # writes answered 409 (another replica wrote first): read again
    refused: int = 0  # binds refused because the ledger holds claims the pod does not fit beside
    withdrawn: int = 0  # claims removed after their Binding failed
    pruned: int = 0  # claims of pods gone, finished or never bound, removed
    absorbed: int = 0  # claims of other replicas recorded in the state


def replica_identity(name: str) -> str:
    """This extender's name in the claims it writes: its pod (or host-pid) and a random suffix, so
    that two processes never share one."""
    return f"{name}/{uuid.uuid4().hex[:6]}"


class Claims:
    """The ledger writes of one extender, over its state.

    ``note_pod(obj)``: apply a pod read from the API server to the state (the sync's)."""

    def __init__(
        self,
        ledger: ClaimLedger,
        state: ClusterState,
        *,
        identity: str,
        ttl: float = 60.0,
        note_pod: Callable[[dict[str, object]], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ledger = ledger
        self.state = state
        self.identity = identity
        self.ttl = ttl
        self.note_pod = note_pod
        self.clock = clock
        self.ledgers: dict[str, NodeLedger] = {}  # each node's ledger as last read or written
        # pods recorded in the state from another replica's claim alone (not yet seen bound by the
        # watch): the request standing for the pod, and when the claim was last read
        self.stubs: dict[str, tuple[PodRequest, float]] = {}
        self.counters = ClaimCounters()
        self._locks: dict[str, asyncio.Lock] = {}
        self._queued: dict[str, list[Queued]] = {}  # claims waiting for their node's next write
        self._writers: dict[str, asyncio.Task[None]] = {}  # the task writing each node's claims now

    # ------------------------------------------------------------------ the bind path
    async def claim(self, pod: PodRequest, alloc: PodAllocation) -> str | None:
        """Record ``pod``'s claim on ``alloc`` in its node's ledger; None when written (the Binding may
        go out), otherwise why not (the bind is refused; nothing was written for it).

        Claims for one node are written one write at a time: those that come while a write is on its
        way wait for it and then go out together, in one write (binpacking sends the binds of a node's
        pods in a burst; each would otherwise wait for every write before it)."""
        node = alloc.node
        done: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._queued.setdefault(node, []).append((pod, alloc, done))
        writer = self._writers.get(node)
        if writer is None or writer.done():
            writer = asyncio.create_task(self._drain(node), name=f"devshare-claims-{node}")
            self._writers[node] = writer
            writer.add_done_callback(lambda t: self._writers.pop(node) if self._writers.get(node) is t else None)
        return await asyncio.shield(done)

    async def _drain(self, node: str) -> None:
        """Write the claims queued for ``node``, a batch per write, until none is left."""
        while batch := self._queued.pop(node, None):
            try:
                answers = await self._write_batch(node, batch)
            except Exception as e:  # never leave a bind waiting: each gets the reason
                log.exception("writing the claim ledger of node %s failed unexpectedly", node)
                answers = [f"pod {p.key}: recording its claim failed ({type(e).__name__}: {e}); nothing was bound"
                           for p, _, _ in batch]
            for (_, _, done), answer in zip(batch, answers, strict=True):
                if not done.done():
                    done.set_result(answer)

    async def _write_batch(self, node: str, batch: list[Queued]) -> list[str | None]:
        """One compare-and-swap write of ``batch``'s claims (retried on 409): per claim, None when
        written, otherwise why not."""
        async with self._lock(node):
            decided: list[tuple[list[str | None], int]] = []

            def change(ledger: NodeLedger) -> dict[str, Claim] | None:
                claims, answers, pruned = self._decide(ledger, batch)
                decided[:] = [(answers, pruned)]
                return None if all(answers) else claims  # every claim refused: nothing to write

            try:
                # a ledger not seen yet is written as if it did not exist: a create, answered 409 when
                # it does (then read), so that a bind costs one request to the ledger either way
                written = await self._swap(self.ledgers.get(node) or NodeLedger(node), change)
            except Contended:
                return [f"pod {p.key}: the claim ledger of node {node} ({self.ledger.where(node)}) changed "
                        f"{ATTEMPTS} times while devshare tried to record the pod's claim; nothing was bound"
                        for p, _, _ in batch]
            except BackendError as e:
                self.ledgers.pop(node, None)  # the write may have happened: read the ledger afresh next time
                return [f"pod {p.key}: recording its claim in the claim ledger of node {node} "
                        f"({self.ledger.where(node)}) failed: {e}; nothing was bound" for p, _, _ in batch]
            answers, pruned = decided[0]
            self.counters.refused += sum(1 for a in answers if a and NO_FIT in a)
            if written is not None:
                self.counters.pruned += pruned
            return answers

    async def _swap(self, ledger: NodeLedger,
                    change: Callable[[NodeLedger], dict[str, Claim] | None]) -> NodeLedger | None:
        """The one compare-and-swap loop of every ledger write: write ``change(ledger)`` at the version
        ``ledger`` was read (None from ``change``: nothing to write); after a 409 (another replica
        wrote first) read the ledger again and ask ``change`` again. Returns the ledger written, or
        None when nothing was. Raises :class:`Contended` after ``ATTEMPTS`` lost rounds, and the
        backend's errors as they come. The caller holds the node's lock."""
        for _ in range(ATTEMPTS):
            claims = change(ledger)
            if claims is None:
                return None
            try:
                written = await self.ledger.write(ledger, claims)
            except Conflict:
                self.counters.conflicts += 1
                ledger = await self._read(ledger.node)
                continue
            self.counters.writes += 1
            self._adopt(written)
            return written
        raise Contended(f"the claim ledger of node {ledger.node} changed {ATTEMPTS} times in a row")

    def _decide(self, ledger: NodeLedger, batch: list[Queued]) -> tuple[dict[str, Claim], list[str | None], int]:
        """The claims to write for ``batch`` over ``ledger``, the answer of each of its pods (None: its
        claim is in) and how many claims were pruned: each pod decided in turn as if it were claimed
        alone over the claims decided before it. Synchronous: no other engine call between the
        absorptions, the checks and the claims returned."""
        node = ledger.node
        if ledger.error is not None:
            why = (f"the claim ledger of node {node} ({self.ledger.where(node)}) cannot be read: "
                   f"{ledger.error}; devshare binds nothing there until it is repaired or deleted")
            return dict(ledger.claims), [why] * len(batch), 0
        claims = {k: c for k, c in ledger.claims.items() if not self._gone(c)}
        pruned = len(ledger.claims) - len(claims)
        answers = [self._decide_one(node, claims, pod, alloc) for pod, alloc, _ in batch]
        return claims, answers, pruned

    def _decide_one(self, node: str, claims: dict[str, Claim], pod: PodRequest, alloc: PodAllocation) -> str | None:
        """Add ``pod``'s claim to ``claims`` (None) when it fits beside every other claim there and
        everything the state holds; otherwise leave ``claims`` as they are and say why not."""
        held = claims.get(pod.key)
        if held is not None and held.by != self.identity:
            # another replica's claim under this name (this pod's, or one of an earlier pod of the name
            # whose end the watch has not shown yet): never overwritten
            return (f"pod {pod.key} is being bound by another devshare replica ({held.by} claimed devices of node "
                    f"{node} for it {max(0.0, self.clock() - held.at):.0f} s ago); a claim whose pod never binds "
                    f"is released after {self.ttl:g} s")
        unreflected = self._absorb(c for k, c in claims.items() if k != pod.key)
        reason = self._check(pod, alloc, unreflected)
        if reason is not None:
            return (f"pod {pod.key} {NO_FIT} {node} beside the claims in its claim ledger (another devshare "
                    f"replica may have bound a pod to these devices first): {reason}")
        claims[pod.key] = Claim(pod=pod.key, uid=pod.uid, by=self.identity, at=self.clock(), allocation=alloc,
                                priority=pod.priority)
        return None

    def _gone(self, c: Claim) -> bool:
        """The claim's pod is surely gone or finished: the watch has seen it end (never a guess: a pod
        the watch does not know, or knows under another uid, may just have been created)."""
        return self.state.is_finished(c.pod, c.uid)

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
        for c in claims:
            if self._reflected(c):
                continue
            if c.by == self.identity or c.pod in self.state.pods:
                unreflected.append(c)
                continue
            ns, _, name = c.pod.partition("/")
            stub = PodRequest(namespace=ns, name=name, uid=c.uid, priority=c.priority)
            self.state.add_bound(stub, c.allocation)
            self.stubs[c.pod] = (stub, self.clock())
            self.counters.absorbed += 1
        return unreflected

    def _check(self, pod: PodRequest, alloc: PodAllocation, unreflected: list[Claim]) -> str | None:
        """Why ``alloc`` does not fit beside everything the node holds and ``unreflected`` (None: it fits)."""
        if not unreflected:
            return self.state.why_not(pod, alloc, ignore=pod.key)
        scratch = self.state.scratch([alloc.node])
        for c in unreflected:
            ns, _, name = c.pod.partition("/")
            scratch.add_bound(PodRequest(namespace=ns, name=f"{name} (claim)", uid=c.uid), c.allocation)
        return scratch.why_not(pod, alloc, ignore=pod.key)

    async def withdraw(self, pod: PodRequest, alloc: PodAllocation, *, unsure: bool = False) -> None:
        """Remove this replica's claim for ``pod`` (its Binding failed). ``unsure``: the Binding's
        outcome is unknown (the connection broke): the pod is written to first, so that the Binding
        can no longer land, and a pod found bound keeps its claim. Best effort: a claim left behind
        is released by :meth:`sweep` once its pod is gone or after ``ttl``."""
        node = alloc.node
        if unsure:
            held = (self.ledgers.get(node) or NodeLedger(node)).claims.get(pod.key)
            if held is None or held.by != self.identity or not await self._expire(held, node):
                return

        def change(ledger: NodeLedger) -> dict[str, Claim] | None:
            c = ledger.claims.get(pod.key)
            if c is None or c.by != self.identity or c.uid != pod.uid or c.allocation != alloc:
                return None  # not this replica's claim for this very bind (any more)
            return {k: v for k, v in ledger.claims.items() if k != pod.key}

        async with self._lock(node):
            try:
                if await self._swap(self.ledgers.get(node) or await self._read(node), change) is not None:
                    self.counters.withdrawn += 1
            except (BackendError, Contended) as e:
                if isinstance(e, BackendError):
                    self.ledgers.pop(node, None)
                log.info("the claim of pod %s on node %s could not be withdrawn (%s); it is released once the pod "
                         "is gone or after %g s", pod.key, node, e, self.ttl)

    # ------------------------------------------------------------------ reading
    def _lock(self, node: str) -> asyncio.Lock:
        lock = self._locks.get(node)
        if lock is None:
            lock = self._locks[node] = asyncio.Lock()
        return lock

    async def _read(self, node: str) -> NodeLedger:
        ledger = await self.ledger.read(node)
        self._adopt(ledger)
        return ledger

    def _adopt(self, ledger: NodeLedger) -> None:
        """A node's ledger as just read or written: kept, its claims absorbed, and the state's records
        made from claims no longer in it (withdrawn: their Binding failed) released."""
        node = ledger.node
        self.ledgers[node] = ledger
        for key, (stub, _) in list(self.stubs.items()):
            rec = self.state.pods.get(key)
            if rec is None or rec.pod is not stub:
                del self.stubs[key]
            elif rec.allocation.node == node:
                if key in ledger.claims:
                    self.stubs[key] = (stub, self.clock())  # still claimed: read again later
                else:
                    self.state.release(key)
                    del self.stubs[key]
        if ledger.error is None:
            self._absorb(c for c in ledger.claims.values() if not self._gone(c))

    async def load(self) -> None:
        """Read every node's ledger (at start and after each re-list of pods, before the state is
        used), retrying until it works: the state then counts the claims of binds still in flight."""
        backoff = Backoff()
        while True:
            try:
                ledgers = await self.ledger.list()
                break
            except BackendError as e:
                delay = backoff.next_delay()
                hint = " (does the extender's Role allow list on configmaps?)" if e.code == 403 else ""
                log.warning("listing the claim ledgers failed%s: %s; retrying in %.1fs", hint, e, delay)
                await asyncio.sleep(delay)
        self.ledgers.clear()
        for ledger in ledgers.values():
            if ledger.error is not None:
                log.warning("the claim ledger of node %s cannot be read: %s", ledger.node, ledger.error)
            self._adopt(ledger)

    # ------------------------------------------------------------------ the watch
    def pod_changed(self, type_: str, obj: Mapping[str, object]) -> None:
        """A pod event (after the state applied it): a pod recorded from a claim alone, now seen bound
        by the watch, is recorded as the watch has it."""
        m = meta(obj)
        key = f"{m.get('namespace')}/{m.get('name')}"
        held = self.stubs.get(key)
        if held is None:
            return
        rec = self.state.pods.get(key)
        if rec is None or rec.pod is not held[0]:
            del self.stubs[key]
            return
        spec = obj.get("spec")
        status = obj.get("status")
        phase = status.get("phase") if isinstance(status, dict) else None
        if type_ != "DELETED" and phase not in TERMINAL_PHASES and isinstance(spec, dict) and spec.get("nodeName"):
            del self.stubs[key]
            self.state.release(key)
            if self.note_pod is not None:
                self.note_pod(dict(obj))

    # ------------------------------------------------------------------ cleaning up
    async def sweep(self, *, leading: bool) -> None:
        """Periodically: read again the ledgers holding claims the watch has not confirmed for a while
        (any replica), and (``leading``) remove the claims of pods gone or finished and of pods that
        did not bind within ``ttl`` (after the expiry annotation, see the module's doc)."""
        now = self.clock()
        recheck = {n for key, (_, since) in self.stubs.items()
                   if now - since > STUB_RECHECK and (n := self._node_of(key))}
        for node in sorted(recheck):
            async with self._lock(node):
                try:
                    await self._read(node)
                except BackendError as e:
                    log.info("re-reading the claim ledger of node %s failed: %s", node, e)
        if not leading:
            return
        for node, ledger in list(self.ledgers.items()):
            if ledger.error is not None:
                continue
            gone = [c for c in ledger.claims.values() if self._gone(c)]
            old = [c for c in ledger.claims.values() if c not in gone and now - c.at > self.ttl
                   and not self._bound_here(c, node)]
            if not gone and not old:
                continue
            expired = [c for c in old if await self._expire(c, node)]
            if gone or expired:
                await self._remove(node, gone + expired)

    def _node_of(self, key: str) -> str | None:
        rec = self.state.pods.get(key)
        return rec.allocation.node if rec is not None else None

    def _bound_here(self, c: Claim, node: str) -> bool:
        """The watch has the claim's pod bound on ``node`` with this allocation: a live claim."""
        rec = self.state.pods.get(c.pod)
        return (rec is not None and rec.phase == "bound" and c.pod not in self.stubs
                and rec.allocation == c.allocation and rec.pod.uid in ("", c.uid))

    async def _expire(self, c: Claim, node: str) -> bool:
        """Whether a claim older than ``ttl`` may be removed: the pod is written to first (a Binding
        of the claim's writer still on its way then fails on the pod's resourceVersion); a pod that
        is bound to ``node`` keeps its claim."""
        ns, _, name = c.pod.partition("/")
        try:
            obj = await self.ledger.backend.patch_pod_annotations(
                ns, name, {EXPIRED_ANNOTATION: f"{node} {micro_time(self.clock())}"})
        except NotFound:
            return True
        except BackendError as e:
            log.info("the stale claim of pod %s on node %s is kept for now: %s", c.pod, node, e)
            return False
        m = meta(obj)
        status = obj.get("status") or {}
        if c.uid and m.get("uid") and m.get("uid") != c.uid:
            return True
        if isinstance(status, dict) and status.get("phase") in TERMINAL_PHASES:
            return True
        return bool((obj.get("spec") or {}).get("nodeName") != node)

    async def _remove(self, node: str, claims: list[Claim]) -> None:
        """Remove ``claims`` (each only if it is still the same claim) from ``node``'s ledger."""
        removed: list[str] = []

        def change(ledger: NodeLedger) -> dict[str, Claim] | None:
            keep = {k: c for k, c in ledger.claims.items() if c not in claims}
            if len(keep) == len(ledger.claims) or ledger.error is not None:
                return None
            removed[:] = sorted(set(ledger.claims) - set(keep))
            return keep

        async with self._lock(node):
            try:
                if await self._swap(self.ledgers.get(node) or await self._read(node), change) is not None:
                    self.counters.pruned += len(removed)
                    log.info("released %d claim(s) on node %s of pods gone, finished or never bound: %s",
                             len(removed), node, ", ".join(removed))
            except (BackendError, Contended) as e:
                if isinstance(e, BackendError):
                    self.ledgers.pop(node, None)
                log.info("pruning the claim ledger of node %s failed: %s", node, e)
