"""devshare as a custom DRA allocation controller (DESIGN.md, "Dynamic Resource Allocation").

It runs beside the extender, on the extender's engine state and lifecycle, so a claim's devices and
an extended-resource pod's devices are counted in the same arrays and neither path books what the
other holds.

Informers (list, then watch; 410 Gone re-lists): DeviceClasses, ResourceSlices (every driver's),
ResourceClaims (every claim: allocated by devshare, by kube-scheduler, by anyone) and the pods not
yet bound. The state is rebuilt from them alone: every allocated claim becomes a record
(:func:`~devshare.engine.dra.allocate.recorded`; one that would over-book a card is refused, not
counted, and reported by a Warning Event ``DeviceOverbooked`` on the claim).

A pod carrying devshare's scheduling gate (:data:`~devshare.model.dra.GATE`, added by the webhook)
is allocated when this replica leads:

1. its claims are read (a claim from a template once the pod's status names it);
2. the engine chooses node and devices for the claims of devshare's classes
   (:func:`~devshare.engine.dra.allocate.allocate`), the records are assumed in the state (all or
   nothing), the leader fence is awaited;
3. each claim's ``status.allocation`` is written with its resourceVersion as precondition (another
   writer's change fails it with 409: the decision is dropped and made again from the new claim);
4. the gate is lifted (the pod PUT with its resourceVersion; retried on 409 from a fresh read).

A refusal is a Warning Event ``FailedDRAAllocation`` on the pod (once per message); a pod refused
for want of capacity is tried again every ``retry`` seconds and whenever a claim is released.
The claims of a pod deleted before its gate lifted are released (:mod:`.release`).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from devshare.engine.dra.allocate import PodAsk, Refusal, allocate, record_request, recorded
from devshare.engine.dra.inventory import Inventory
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.records import Conflict
from devshare.engine.state import DEFAULT_ASSUME_TTL
from devshare.kube.dra import DRA_KINDS, DraApi, DraKind
from devshare.kube.errors import BackendError, NotFound
from devshare.kube.errors import Conflict as ApiConflict
from devshare.kube.informer import Backoff
from devshare.model import dra
from devshare.model.dra import Claim, has_gate, node_filter, parse_claim, pod_claims
from devshare.model.draslices import parse_device_class, parse_slice
from devshare.model.errors import InvalidInput
from devshare.model.kubeobjects import meta, object_key
from devshare.model.pod import parse_pod
from devshare.server.dra.events import FAILED_REASON, OVERBOOKED_REASON, DraEvents
from devshare.server.dra.publisher import publish
from devshare.server.dra.release import release_claims
from devshare.server.dra.watches import DraWatches, keys

log = logging.getLogger(__name__)


class DraController:
    def __init__(self, api: DraApi, lifecycle: Lifecycle, *, is_leader: Callable[[], bool] = lambda: True,
                 fence: Callable[[], Awaitable[str | None]] | None = None,
                 ready: Callable[[], Awaitable[None]] | None = None,
                 clock: Callable[[], float] = time.monotonic, share_id: Callable[[], str] = lambda: str(uuid.uuid4()),
                 assume_ttl: float = DEFAULT_ASSUME_TTL, retry: float = 5.0, publish_slices: bool = False,
                 backoff: Callable[[], Backoff] = Backoff) -> None:
        self.api = api
        self.lifecycle = lifecycle
        self.state = lifecycle.state
        self.is_leader = is_leader
        self.fence = fence
        self.ready = ready  # awaited before the first list: the engine's nodes and devices are in
        self.clock = clock
        self.share_id = share_id
        self.assume_ttl = assume_ttl
        self.retry = retry
        self.publish_slices = publish_slices
        self._built: dict[str, tuple[Any, str]] = {}  # slice -> (devices it was written from, its version)
        self.inventory = Inventory()
        self.claims: dict[str, dict[str, Any]] = {}  # every claim, as last seen
        self.slices: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}  # pods not bound yet
        self.synced = asyncio.Event()
        self.off = False  # the API server serves no resource.k8s.io/v1: nothing to allocate
        self._queue: dict[str, None] = {}
        self._wake = asyncio.Event()
        self._waiting: set[str] = set()  # gated pods refused for now: tried again every `retry` seconds
        self._tasks: list[asyncio.Task[None]] = []
        self._side: set[asyncio.Task[Any]] = set()
        self.watches = DraWatches(api, self.apply, self._held, backoff=backoff)
        self.events = DraEvents(api, self._spawn)
        # counters (metrics)
        self.allocated = 0  # claims allocated
        self.gates_lifted = 0
        self.refused = 0  # allocation attempts refused (a pod's claims)
        self.conflicts = 0  # claim writes that lost to another writer (409)
        self.released = 0  # claims released because their pod went away
        self.overbooked = 0  # allocated claims refused by the accounting
        self.invalid = 0  # objects that did not parse

    # ------------------------------------------------------------------ running
    def start(self) -> asyncio.Task[None]:
        t = asyncio.create_task(self.run(), name="devshare-dra")
        self._tasks.append(t)
        return t

    async def stop(self) -> None:
        for t in [*self._tasks, *self._side]:
            t.cancel()
        for t in [*self._tasks, *self._side]:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()

    async def run(self) -> None:
        if self.ready is not None:
            await self.ready()
        why = await self.watches.list_all()
        if why:
            log.warning("DRA is off: %s (docs/dra.md). Extended-resource pods are scheduled as ever", why)
            self.off = True
            return
        self.synced.set()
        log.info("DRA synced: %d slices, %d claims, %d pending pods", len(self.slices), len(self.claims),
                 len(self.pods))
        async with asyncio.TaskGroup() as tg:
            for kind in DRA_KINDS:
                tg.create_task(self.watches.watch(kind), name=f"devshare-dra-watch-{kind}")
            tg.create_task(self._work(), name="devshare-dra-work")
            tg.create_task(self._tick(), name="devshare-dra-retry")

    def _held(self, kind: DraKind) -> dict[str, dict[str, Any]]:
        if kind == "deviceclasses":
            return keys(self.inventory.classes)
        return {"resourceclaims": self.claims, "resourceslices": self.slices, "pods": self.pods}[kind]

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.retry)
            for key in list(self._waiting):
                self._enqueue(key)
            for key, pod in self.pods.items():
                if has_gate(pod):
                    self._enqueue(key)  # a leader that just took over, a write that failed
            if self.publish_slices and self.is_leader():
                await publish(self.api, self.slices, self.state.devices, self._built)

    async def _work(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                key = next(iter(self._queue))
                del self._queue[key]
                try:
                    await self.process(key)
                except Exception:
                    log.exception("allocating the claims of pod %s failed unexpectedly", key)
                    self._waiting.add(key)

    def _enqueue(self, key: str) -> None:
        self._queue[key] = None
        self._wake.set()

    # ------------------------------------------------------------------ applying objects
    def apply(self, kind: DraKind, type_: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        try:
            if kind == "deviceclasses":
                if type_ == "DELETED":
                    self.inventory.remove_class(key)
                else:
                    self.inventory.set_class(parse_device_class(obj))
            elif kind == "resourceslices":
                if type_ == "DELETED":
                    self.slices.pop(key, None)
                    self.inventory.remove_slice(key)
                else:
                    self.slices[key] = obj
                    self.inventory.set_slice(key, parse_slice(obj))
                    self._record_unrecorded()
            elif kind == "resourceclaims":
                self._apply_claim(type_, key, obj)
            else:
                self._apply_pod(type_, key, obj)
        except InvalidInput as e:
            self.invalid += 1
            log.warning("ignoring %s %s: %s", kind, key, e)

    def _apply_claim(self, type_: str, key: str, obj: dict[str, Any]) -> None:
        ns, _, name = key.partition("/")
        record = dra.claim_record_key(ns, name)
        if type_ == "DELETED":
            self.claims.pop(key, None)
            self._release_record(record)
            self._wake_namespace(ns)
            return
        self.claims[key] = obj
        claim = parse_claim(obj)
        self._record(claim)
        self._wake_namespace(ns, claim.name)

    def _record(self, claim: Claim) -> None:
        """Count what ``claim`` holds (or stop counting it once it holds nothing)."""
        key = dra.claim_record_key(claim.namespace, claim.name)
        rec = self.state.pods.get(key)
        alloc = recorded(self.state, self.inventory, claim)
        if alloc is None:
            if rec is not None and rec.phase == "bound":
                self._release_record(key)
            return
        request = record_request(claim)
        if rec is not None and rec.allocation == alloc:
            if rec.phase == "assumed":
                self.lifecycle.confirm(request, alloc)
            return
        if rec is not None and rec.phase == "assumed" and self.lifecycle.binding(key):
            return  # our own write in flight: its answer decides
        if rec is not None:
            self.lifecycle.release(key)
        reason = self.lifecycle.add_watched(request, alloc)
        if reason is not None:
            self.overbooked += 1
            log.warning("claim %s is allocated devices that would be over-booked; not counted: %s", claim.key, reason)
            self.events.report("ResourceClaim", claim.namespace, claim.name, claim.uid, OVERBOOKED_REASON,
                         f"devshare does not count this claim's allocation: {reason}")

    def _record_unrecorded(self) -> None:
        """Claims allocated on devices a slice now explains (another driver's GPU found by UUID)."""
        for key, obj in self.claims.items():
            ns, _, name = key.partition("/")
            if (obj.get("status") or {}).get("allocation") and dra.claim_record_key(ns, name) not in self.state.pods:
                with contextlib.suppress(InvalidInput):
                    self._record(parse_claim(obj))

    def _release_record(self, key: str) -> None:
        rec = self.state.pods.get(key)
        if rec is not None and not self.lifecycle.binding(key):
            self.lifecycle.release(key)
            for pkey in list(self._waiting):
                self._enqueue(pkey)  # room freed: pods waiting for capacity try again

    def _wake_namespace(self, ns: str, claim: str | None = None) -> None:
        for key, pod in self.pods.items():
            if not key.startswith(f"{ns}/") or not has_gate(pod):
                continue
            refs = pod_claims(pod)
            if claim is None or any(r.claim in ("", claim) for r in refs):
                self._enqueue(key)

    def _apply_pod(self, type_: str, key: str, obj: dict[str, Any]) -> None:
        if type_ == "DELETED":
            old = self.pods.pop(key, None)
            self._waiting.discard(key)
            self.events.forget(key)
            if old is not None and pod_claims(old):  # a pod without claims has none to release: no read
                self._spawn(self._pod_gone(key, old))
            return
        if (obj.get("spec") or {}).get("nodeName"):
            self.pods.pop(key, None)
            return
        self.pods[key] = obj
        if has_gate(obj):
            self._enqueue(key)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    # ------------------------------------------------------------------ allocating a pod's claims
    async def process(self, key: str) -> None:
        """Allocate the claims of the gated pod ``key`` and lift its gate (or say why not)."""
        pod = self.pods.get(key)
        if pod is None or not has_gate(pod):
            self._waiting.discard(key)
            return
        if not self.synced.is_set() or not self.is_leader():
            self._waiting.add(key)
            return
        m = meta(pod)
        ns = str(m.get("namespace") or "default")
        mine: list[Claim] = []
        allocated_nodes: set[str] = set()
        for ref in pod_claims(pod):
            if not ref.claim:
                self._waiting.add(key)
                return  # its claim is not generated from the template yet
            obj = self.claims.get(f"{ns}/{ref.claim}")
            if obj is None:
                self._waiting.add(key)
                return  # not seen yet
            try:
                claim = parse_claim(obj)
            except InvalidInput as e:
                self._refuse(pod, f"claim {ns}/{ref.claim} cannot be read: {e}", permanent=True)
                return
            served = [c for c in claim.classes() if self._serves(c)]
            if not served:
                continue  # kube-scheduler allocates it
            if claim.allocation is not None:
                if claim.allocation.node:
                    allocated_nodes.add(claim.allocation.node)
                continue
            if len(served) != len(claim.classes()):
                self._refuse(pod, f"claim {claim.key} mixes devshare's DeviceClasses with others "
                                  f"({', '.join(sorted(claim.classes()))}); devshare cannot allocate part of a claim",
                             permanent=True)
                return
            if claim.deleting:
                self._refuse(pod, f"claim {claim.key} is being deleted", permanent=False)
                return
            mine.append(claim)
        if len(allocated_nodes) > 1:
            nodes = ", ".join(sorted(allocated_nodes))
            self._refuse(pod, f"the pod's claims are allocated on different nodes ({nodes})", permanent=True)
            return
        if mine:
            ok = await self._allocate(key, pod, mine, next(iter(allocated_nodes), ""))
            if not ok:
                return
        await self._lift_gate(key)

    def _serves(self, device_class: str) -> bool:
        info = self.inventory.classes.get(device_class)
        if info is not None:
            return bool(info.device_type)
        return device_class in dra.shipped_classes()

    async def _allocate(self, key: str, pod: dict[str, Any], claims: list[Claim], node: str) -> bool:
        m = meta(pod)
        try:
            parsed = parse_pod(pod)
            cpu, memory, priority = parsed.cpu_milli, parsed.memory_bytes, parsed.priority
        except InvalidInput:
            cpu = memory = priority = 0
        ask = PodAsk(namespace=str(m.get("namespace") or "default"), name=str(m.get("name") or ""),
                     uid=str(m.get("uid") or ""), claims=tuple(claims), node=node, nodes=node_filter(pod),
                     cpu_milli=cpu, memory_bytes=memory, priority=priority)
        try:
            decision = allocate(self.lifecycle.scheduler, self.inventory, ask, share_id=self.share_id)
        except Refusal as e:
            self._refuse(pod, e.message, permanent=e.permanent)
            return False
        self.lifecycle.arrived(decision.request)
        assumed: list[str] = []
        try:
            for cd in decision.claims:
                self.lifecycle.assume(cd.record, cd.allocation, now=self.clock(), ttl=self.assume_ttl)
                assumed.append(cd.record.key)
        except Conflict as e:
            for k in assumed:
                self.lifecycle.forget(k)
            self._refuse(pod, f"the devices chosen were taken meanwhile ({e}); trying again", permanent=False)
            return False
        fenced = await self.fence() if self.fence is not None else None
        if fenced:  # no longer the leader: another replica decides
            for k in assumed:
                self.lifecycle.forget(k)
            log.info("pod %s: not writing claims (%s)", key, fenced)
            self._waiting.add(key)
            return False
        for n, cd in enumerate(decision.claims):
            rkey = cd.record.key
            with self.lifecycle.bind_in_flight(rkey):
                stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                written = await self._write_claim(cd.claim, dra.allocation_status(list(cd.results), decision.node,
                                                                                  timestamp=stamp))
            if written is None:
                for later in decision.claims[n:]:
                    self.lifecycle.forget(later.record.key, later.allocation)
                self._waiting.add(key)
                return False
            self.lifecycle.confirm(cd.record, cd.allocation)
            self.allocated += 1
            self.claims[cd.claim.key] = written
        self._waiting.discard(key)
        log.info("pod %s: claims %s allocated on %s", key, ", ".join(c.claim.key for c in decision.claims),
                 decision.node)
        return True

    async def _write_claim(self, claim: Claim, allocation: dict[str, Any]) -> dict[str, Any] | None:
        obj = copy.deepcopy(self.claims.get(claim.key) or {})
        if meta(obj).get("resourceVersion") != claim.resource_version:
            return None  # changed since decided: decide again
        obj.setdefault("status", {})["allocation"] = allocation
        try:
            return await self.api.update_status(obj)
        except ApiConflict:
            self.conflicts += 1
            log.info("claim %s changed before its allocation was written; deciding again", claim.key)
        except NotFound:
            log.info("claim %s was deleted before its allocation was written", claim.key)
        except BackendError as e:
            log.warning("writing the allocation of claim %s failed: %s", claim.key, e)
        return None

    async def _lift_gate(self, key: str) -> None:
        for _ in range(4):
            pod = self.pods.get(key)
            if pod is None or not has_gate(pod):
                return
            new = copy.deepcopy(pod)
            spec = new.setdefault("spec", {})
            spec["schedulingGates"] = [g for g in spec.get("schedulingGates") or []
                                       if not (isinstance(g, dict) and g.get("name") == dra.GATE)]
            try:
                self.pods[key] = await self.api.update("pods", new)
                self.gates_lifted += 1
                self._waiting.discard(key)
                return
            except ApiConflict:
                ns, _, name = key.partition("/")
                fresh = await self.api.get("pods", ns, name)
                if fresh is None:
                    return
                self.pods[key] = fresh
            except NotFound:
                return
            except BackendError as e:
                log.warning("lifting the scheduling gate of pod %s failed: %s", key, e)
                self._waiting.add(key)
                return
        self._waiting.add(key)

    def _refuse(self, pod: dict[str, Any], message: str, *, permanent: bool) -> None:
        m = meta(pod)
        key = object_key(pod)
        self.refused += 1
        if not permanent:
            self._waiting.add(key)
        else:
            self._waiting.discard(key)
        log.info("pod %s: claims not allocated: %s", key, message)
        self.events.report("Pod", str(m.get("namespace") or "default"), str(m.get("name") or ""),
                           str(m.get("uid") or ""), FAILED_REASON,
                           f"devshare cannot allocate the pod's claims: {message}")

    # ------------------------------------------------------------------ pods gone before their gate lifted
    async def _pod_gone(self, key: str, old: dict[str, Any]) -> None:
        for claim, stored in await release_claims(self.api, key, old, pods=self.pods, claims=self.claims,
                                                  serves=self._serves, is_leader=self.is_leader):
            self.released += 1
            self.claims[claim.key] = stored
            self._release_record(dra.claim_record_key(claim.namespace, claim.name))
