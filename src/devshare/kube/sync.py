"""StateSync: keeps the engine's ClusterState in step with a backend (list, then watch).

Start-up lists Nodes, Devices and Pods, rebuilds every allocation from bound pods' annotations
(the annotations are the whole truth, DESIGN.md) and only then sets :attr:`StateSync.synced`; the
extender refuses to filter before that. Then each kind is watched from its list's
resourceVersion: a 410 Gone re-lists that kind and reconciles (what vanished is released or
removed), a dropped connection reconnects with exponential backoff from the last version seen.

Every engine call happens on the event loop's thread, between awaits, so engine calls are atomic
with respect to each other and to the extender's handlers running on the same loop.

Rules for pods:
- bound (``spec.nodeName``) with a decodable allocation annotation: ``state.add_bound``;
- Succeeded/Failed or deleted: ``state.release`` (a pod in flight, "assumed", is released only when
  deleted);
- pending: nothing is recorded (the scheduler reserves it; an annotation on an unbound pod is not
  truth), but a pending pod of devshare's scheduler (``scheduler_name``) is kept as the watch last
  delivered it (:meth:`StateSync.pending_pod`, at most ``MAX_PENDING``), so that a bind can decide
  from the pod as the API server has it without reading it again;
- a malformed annotation is logged and counted in :attr:`StateSync.malformed`, never fatal;
- a changed allocation tagged ``devshare.io/trade`` (the node agent's trade of two identical pods)
  waits for its partner's write and is applied with it (:mod:`devshare.kube.trades`);
- an allocation that would book a card beyond its compute or memory is refused and not counted
  (:meth:`ClusterState.add_bound_checked`), logged, counted in :attr:`StateSync.overbooked` and
  reported by a Warning Event ``DeviceOverbooked`` on the pod. While such a pod waits on its node,
  every change there (a pod leaving, an allocation changing) judges the node's bound pods again in
  the order they got it, the earlier winning a card: a refused pod is counted as soon as its card
  has room, and the state never depends on the order the events came in. A (re-)list applies pods
  in that same order, so a restart rebuilds the same state.
A re-list keeps the state's assumed pods (their bind may not be visible yet), and releases a bound
pod missing from the list only once a GET confirms it is gone (it may have been created and bound
after the list was taken).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from devshare.engine.state import ClusterState
from devshare.kube.backend import KINDS, OPTIONAL_KINDS, Backend, Kind, WatchEvent, meta, object_key, resource_version
from devshare.kube.errors import BackendError, Gone, Unavailable
from devshare.kube.takeover import Inventories, PeerPods
from devshare.kube.trades import DEFAULT_TIMEOUT, Trades
from devshare.model.allocation import PodAllocation
from devshare.model.codecs import decode_allocation
from devshare.model.device import parse_device
from devshare.model.dra import is_claim_record
from devshare.model.errors import InvalidInput
from devshare.model.inventory import koordinator_device
from devshare.model.names import ALLOCATION, GANG_NAME, GROUP_NAME
from devshare.model.node import parse_node
from devshare.model.pod import parse_pod, pod_node_requests
from devshare.model.request import PodRequest

log = logging.getLogger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")
OVERBOOKED_REASON = "DeviceOverbooked"  # the Event on a pod whose allocation was refused
REFUSED_KEPT = 4096  # refused pods remembered (to report each once)
# pending pods of devshare's scheduler kept from the watch (a pod's dict as decoded, a few KB each);
# when full, a new pending pod is not kept (its bind reads it from the API server), the older ones
# (scheduled first) stay
MAX_PENDING = 8192


def bound_order(obj: dict[str, Any]) -> tuple[str, str, str]:
    """When a pod got its node, as well as the API tells (its PodScheduled condition, else its
    creation), to rebuild in the order the allocations were made: the earlier wins a card."""
    m = meta(obj)
    created = str(m.get("creationTimestamp") or "")
    scheduled = ""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "True":
            scheduled = str(c.get("lastTransitionTime") or "")
    return (scheduled or created, created, object_key(obj))


class Backoff:
    """Exponential backoff with jitter: ``initial * 2**n`` capped at ``maximum``."""

    def __init__(self, initial: float = 0.2, maximum: float = 30.0, jitter: float = 0.1) -> None:
        self.initial = initial
        self.maximum = maximum
        self.jitter = jitter
        self.attempts = 0

    def next_delay(self) -> float:
        delay = min(self.maximum, self.initial * 2 ** self.attempts)
        self.attempts += 1
        return float(delay * (1 + self.jitter * random.random()))

    def reset(self) -> None:
        self.attempts = 0


class StateSync:
    def __init__(
        self,
        backend: Backend,
        state: ClusterState,
        *,
        track_node_resources: bool = True,
        backoff: Callable[[], Backoff] = Backoff,
        on_change: Callable[[str, str, dict[str, Any]], None] | None = None,
        kinds: tuple[Kind, ...] = KINDS,
        scheduler_name: str | None = None,
        trade_timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.backend = backend
        # pending pods with this spec.schedulerName are kept from the watch (None: none are kept)
        self.scheduler_name = scheduler_name
        self.pending: dict[str, dict[str, Any]] = {}
        self.kinds = kinds  # what to follow (the webhook needs only devices)
        self.state = state
        self.track_node_resources = track_node_resources
        self._backoff = backoff
        self.on_change = on_change  # called (kind, event type, object) after each applied event
        # awaited after each (re-)list of pods, before the first one marks the state synced (the
        # extender reads its claim ledger there: devshare.server.extender.claims)
        self.after_pods_listed: Callable[[], Awaitable[None]] | None = None
        self.synced = asyncio.Event()
        self.resource_versions: dict[Kind, str] = {}
        # counters (exported as metrics by the server)
        self.malformed = 0  # bound pods whose allocation annotation could not be used
        self.invalid_objects = 0  # Nodes/Devices that did not parse (the previous view is kept)
        # bound pods whose allocation would have over-booked a card: refused, not counted (each
        # refusal of a change of the pod counts once; a DeviceOverbooked Event per pod and allocation)
        self.overbooked = 0
        self._refused: dict[str, tuple[str, PodAllocation]] = {}
        # the refused ones still on their node, with what re-judging them needs; and when each bound
        # pod got its node (bound_order): a node holding a refused pod is judged again in that order
        # at each change on it, so the state never depends on the order events came in (a restart
        # rebuilds it the same) and a refused pod is counted as soon as its card has room
        self._waiting: dict[str, tuple[dict[str, Any], PodRequest, PodAllocation]] = {}
        self._order: dict[str, tuple[str, str, str]] = {}
        self._event_tasks: set[asyncio.Task[None]] = set()
        # every pod that exists (not deleted, not finished), key -> uid, and the pods of each group
        # (``<ns>/<group>`` -> keys): a group's plan holds devices only for pods that exist
        self.pods_present: dict[str, str] = {}
        self.group_pods: dict[str, set[str]] = {}
        self._group_of: dict[str, str] = {}
        self.relists = 0  # re-lists after 410 Gone
        self.reconnects = 0  # watch reconnections after a connection error
        self.events = 0  # watch events applied
        self.apply_errors = 0  # objects whose handling failed unexpectedly (a bug: logged with its trace)
        self._tasks: list[asyncio.Task[None]] = []
        # the node agent's trades: a tagged write waits for its partner's (devshare.kube.trades)
        self.trades = Trades(state, self._record_bound, timeout=trade_timeout)
        # [takeover] peers' inventories beside devshare's Device, and pods other schedulers placed
        self.peer_pods = PeerPods(state)
        self.inventories = Inventories(state, self.peer_pods.node_changed)
        self.absent_kinds: set[Kind] = set()  # optional kinds the API server does not serve, or lets us not read

    @property
    def is_synced(self) -> bool:
        return self.synced.is_set()

    # ------------------------------------------------------------------ running
    async def run(self) -> None:
        """List everything (retrying until it works), mark synced, then watch forever."""
        for kind in self.kinds:
            await self._list_with_retry(kind, initial=True)
        self.synced.set()
        log.info("state synced: %d nodes, %d devices, %d pods with allocations",
                 len(self.state.nodes), len(self.state.devices), len(self.state.pods))
        async with asyncio.TaskGroup() as tg:
            for kind in self.kinds:
                tg.create_task(self._watch_forever(kind), name=f"devshare-watch-{kind}")

    def start(self) -> asyncio.Task[None]:
        """Run in the background; returns the task (cancel it, or call :meth:`stop`)."""
        task = asyncio.create_task(self.run(), name="devshare-state-sync")
        self._tasks.append(task)
        return task

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()

    async def _list_with_retry(self, kind: Kind, *, initial: bool) -> None:
        backoff = self._backoff()
        while True:
            try:
                result = await self.backend.list(kind)
            except BackendError as e:
                if kind in OPTIONAL_KINDS and e.code in (403, 404):  # [takeover] no such CRD, or not ours to read
                    if kind not in self.absent_kinds:
                        log.info("not following %s (%s)", kind, e)
                    self.absent_kinds.add(kind)
                    self.resource_versions[kind] = ""
                    return
                delay = backoff.next_delay()
                log.warning("listing %s failed (%s); retrying in %.1fs", kind, e, delay)
                await asyncio.sleep(delay)
                continue
            self.absent_kinds.discard(kind)
            vanished = self.reconcile(kind, result.items, initial=initial)
            self.resource_versions[kind] = result.resource_version
            await self._check_vanished(vanished)
            if kind == "pods" and self.after_pods_listed is not None:
                await self.after_pods_listed()
            return

    async def _check_vanished(self, keys: list[str]) -> None:
        """Pods the state holds that a re-list did not show: gone, or created (and bound by the
        extender) after the list was taken? Ask for each; release only those really gone."""
        for key in keys:
            ns, _, name = key.partition("/")
            try:
                obj = await self.backend.get_pod(ns, name)
            except BackendError as e:
                log.warning("pod %s: cannot tell whether it still exists (%s); keeping its devices", key, e)
                continue
            if obj is None:
                self.state.release(key)
                self.peer_pods.forget(key)  # [takeover]
            else:
                self._apply("pods", "MODIFIED", obj)

    async def _watch_forever(self, kind: Kind) -> None:
        backoff = self._backoff()
        while True:
            if kind in self.absent_kinds:  # [takeover] an optional kind not served: look again now and then
                await asyncio.sleep(300.0)
                await self._list_with_retry(kind, initial=False)
                continue
            try:
                async for ev in self.backend.watch(kind, self.resource_versions[kind]):
                    backoff.reset()
                    self.apply_event(kind, ev)
            except Gone:
                self.relists += 1
                started = time.monotonic()
                log.warning("watch of %s: history compacted (410 Gone); re-listing", kind)
                await self._list_with_retry(kind, initial=False)
                log.warning("watch of %s: re-listed in %.1f s", kind, time.monotonic() - started)
            except BackendError as e:
                self.reconnects += 1
                delay = backoff.next_delay()
                level = logging.INFO if isinstance(e, Unavailable) else logging.WARNING
                log.log(level, "watch of %s broke (%s); reconnecting in %.1fs", kind, e, delay)
                await asyncio.sleep(delay)
            except Exception:
                # never let one surprise stop the state from following the cluster
                self.reconnects += 1
                delay = backoff.next_delay()
                log.exception("watch of %s failed unexpectedly; reconnecting in %.1fs", kind, delay)
                await asyncio.sleep(delay)

    def apply_event(self, kind: Kind, ev: WatchEvent) -> None:
        rv = resource_version(ev.object)
        if ev.type != "BOOKMARK":
            self.events += 1
            self._apply(kind, ev.type, ev.object)
            if self.on_change is not None:
                self.on_change(kind, ev.type, ev.object)
        if rv is not None:
            self.resource_versions[kind] = rv

    # ------------------------------------------------------------------ applying objects
    def reconcile(self, kind: Kind, items: list[dict[str, Any]], *, initial: bool,
                  release_vanished: bool = False) -> list[str]:
        """Apply a full list; on a re-list, also drop the nodes and devices no longer there. Returns
        the pods held by the state (not assumed) that the list lacks: the caller checks them one by
        one, unless ``release_vanished`` (then they are released here)."""
        vanished: list[str] = []
        present = {object_key(o) for o in items}
        if not initial:
            if kind == "nodes":
                for name in [n for n in self.state.nodes if n not in present]:
                    self.state.remove_node(name)
                    self.inventories.node_gone(name)  # [takeover]
            elif kind in ("devices", "koorddevices"):  # [takeover] each source of inventories on its own
                source = "devshare" if kind == "devices" else "koordinator"
                for name in [n for n, found in self.inventories.sources.items()
                             if found.get(source) is not None and n not in present]:
                    self.inventories.set(name, source, None)
            else:
                for key in [k for k in self.pods_present if k not in present]:
                    self._absent(key)
                for key in [k for k in self.pending if k not in present]:
                    del self.pending[key]
                # (DRA: a claim's record is the DRA controller's to keep, never a vanished pod's)
                vanished = [k for k, r in self.state.pods.items()
                            if k not in present and r.phase != "assumed" and not is_claim_record(k)]
                if release_vanished:
                    for key in vanished:
                        self.state.release(key)
                    vanished = []
        if kind == "pods":
            items = sorted(items, key=bound_order)
        for obj in items:
            self._apply(kind, "ADDED", obj)
        return vanished

    def _present(self, key: str, uid: str, obj: dict[str, Any]) -> None:
        self.pods_present[key] = uid
        m = meta(obj)
        labels, annotations = m.get("labels"), m.get("annotations")
        group = (labels.get(GROUP_NAME) if isinstance(labels, dict) else None) or (
            annotations.get(GANG_NAME) if isinstance(annotations, dict) else None)
        gkey = f"{m.get('namespace', '')}/{group}" if isinstance(group, str) and group else ""
        old = self._group_of.get(key, "")
        if old == gkey:
            return
        if old:
            self._leave(key, old)
        if gkey:
            self._group_of[key] = gkey
            self.group_pods.setdefault(gkey, set()).add(key)

    def _absent(self, key: str) -> None:
        self.pods_present.pop(key, None)
        self.state.remove_plain(key)
        old = self._group_of.pop(key, "")
        if old:
            self._leave(key, old)

    def _leave(self, key: str, gkey: str) -> None:
        members = self.group_pods.get(gkey)
        if members is not None:
            members.discard(key)
            if not members:
                del self.group_pods[gkey]

    def group_exists(self, group: str) -> bool:
        """Whether any pod of ``group`` (``<ns>/<name>``: the label or gang annotation) exists."""
        return bool(self.group_pods.get(group))

    def pod_exists(self, key: str, uid: str) -> bool:
        """Whether the pod ``key`` (of ``uid``, when given) exists, as the watch has it."""
        known = self.pods_present.get(key)
        return known is not None and (not uid or not known or known == uid)

    def uncounted(self, node: str) -> list[tuple[PodRequest, PodAllocation]]:
        """The bound pods of ``node`` the watch delivered but the state does not count: their allocations
        would over-book a card beside what it holds (reservations of binds in flight, other replicas'
        claims, pods bound before them). They wait to be judged again; a bind counts them all the same."""
        return [(pod, alloc) for _, pod, alloc in self._waiting.values() if alloc.node == node]

    def pending_pod(self, key: str) -> dict[str, Any] | None:
        """The pending pod ``key`` of devshare's scheduler as the watch last delivered it (the API
        server's object, never a caller's), or None when it is not kept."""
        return self.pending.get(key)

    def _keep_pending(self, key: str, obj: dict[str, Any]) -> None:
        if self.scheduler_name is None or (obj.get("spec") or {}).get("schedulerName") != self.scheduler_name:
            self.pending.pop(key, None)
            return
        if key in self.pending or len(self.pending) < MAX_PENDING:
            self.pending[key] = obj

    def note_pod(self, obj: dict[str, Any]) -> None:
        """A pod read from the API server (fresher than the watch so far): applied as a change."""
        self._apply("pods", "MODIFIED", obj)

    def _apply(self, kind: Kind, type_: str, obj: dict[str, Any]) -> None:
        try:
            if kind == "nodes":
                self._apply_node(type_, obj)
            elif kind == "devices":
                self._apply_device(type_, obj)
            elif kind == "koorddevices":
                self._apply_device(type_, obj, source="koordinator")
            else:
                self._apply_pod(type_, obj)
        except Exception:
            self.apply_errors += 1
            log.exception("%s event on %s %s could not be applied", type_, kind, object_key(obj))

    def _apply_node(self, type_: str, obj: dict[str, Any]) -> None:
        name = str(meta(obj).get("name", ""))
        if type_ == "DELETED":
            self.state.remove_node(name)
            self.inventories.node_gone(name)  # [takeover]
            return
        try:
            info = parse_node(obj, track_resources=self.track_node_resources)
        except InvalidInput as e:
            self.invalid_objects += 1
            log.warning("ignoring Node %s: %s", name, e)
            return
        self.state.upsert_node(info)
        self.inventories.node(obj)  # [takeover] HAMi's and Volcano's registers, gpushare capacity

    def _apply_device(self, type_: str, obj: dict[str, Any], *, source: str = "devshare") -> None:
        """A Device object: devshare's, or [takeover] Koordinator's as koordlet writes it (``source``
        "koordinator"), which is the node's inventory where it has no devshare Device."""
        name = str(meta(obj).get("name", ""))
        if type_ == "DELETED":
            self.inventories.set(name, source, None)  # [takeover] another source may stand in
            return
        what = "Device" if source == "devshare" else "Koordinator's Device"
        try:
            nd = parse_device(obj) if source == "devshare" else koordinator_device(obj)
        except InvalidInput as e:
            self.invalid_objects += 1
            log.warning("ignoring %s %s (keeping what it said before): %s", what, name, e)
            return
        self.inventories.set(name, source, nd)

    def _apply_pod(self, type_: str, obj: dict[str, Any]) -> None:
        self._apply_pod_allocation(type_, obj)
        self._count_plain(type_, obj)

    def _count_plain(self, type_: str, obj: dict[str, Any]) -> None:
        """A bound pod that holds no record in the state (another scheduler's, one asking for no device,
        one whose allocation is not counted) still takes CPU and memory of its node: counted, so that
        the engine sees each node's CPU and memory as kube-scheduler does (issue 41)."""
        key = object_key(obj)
        node = (obj.get("spec") or {}).get("nodeName")
        if (type_ == "DELETED" or not node or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES
                or key not in self.pods_present):
            self.state.remove_plain(key)
        elif key in self.state.pods:
            self.state.remove_plain(key)  # counted through its record
        else:
            self.state.set_plain(key, str(node), *pod_node_requests(obj))

    def _apply_pod_allocation(self, type_: str, obj: dict[str, Any]) -> None:
        m = meta(obj)
        key = object_key(obj)
        rec = self.state.pods.get(key)
        uid = str(m.get("uid") or "")
        if rec is not None and uid and rec.pod.uid and rec.pod.uid != uid:
            self.state.release(key)  # a new pod under an old name: the old one is gone
            self._forget_bound(key, rec.allocation.node)
            rec = None
        if type_ == "DELETED" or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
            self.trades.gone(uid)
            self.peer_pods.forget(key)  # [takeover]
            gone = self.state.release_finished(key, uid)
            waiting = self._waiting.get(key)
            self._refused.pop(key, None)
            self.pending.pop(key, None)
            if self.pods_present.get(key) in (uid, "") or not uid:
                self._absent(key)
            node = gone.allocation.node if gone is not None else waiting[2].node if waiting is not None else None
            if node is not None:
                self._forget_bound(key, node)
            return
        self._present(key, uid, obj)
        node = (obj.get("spec") or {}).get("nodeName")
        if not node:
            self._keep_pending(key, obj)
            # pending: nothing to record. An assumed or bound record is kept: this event may simply be
            # older than the bind the extender just made (a bound pod never becomes pending again;
            # a new pod under the same name has another uid, handled above).
            return
        self.pending.pop(key, None)
        annotations = m.get("annotations") or {}
        try:
            if not isinstance(annotations, dict):
                raise InvalidInput("metadata.annotations is not a mapping")
            alloc = decode_allocation(annotations)
        except InvalidInput as e:
            self.malformed += 1
            counted = self.peer_pods.apply(obj, node)  # [takeover] its dialect's annotation, when it has one
            log.warning("pod %s: cannot use its allocation annotation: %s%s", key, e,
                        "; counted from its dialect's annotation" if counted else "")
            return
        if alloc is None:
            # [takeover] placed by another scheduler: counted from its annotations (else asks for no device)
            self.peer_pods.apply(obj, node)
            return
        if key in self.peer_pods.node_of:
            self.peer_pods.forget(key)  # [takeover] devshare's own allocation now
        if alloc.node != node:
            self.malformed += 1
            counted = self.peer_pods.apply(obj, node)  # [takeover]
            log.warning("pod %s runs on %s but its allocation names node %s; ignoring the allocation%s",
                        key, node, alloc.node, "; counted from its dialect's annotation" if counted else "")
            return
        if rec is not None and rec.phase == "bound" and rec.allocation == alloc:
            self._order.setdefault(key, bound_order(obj))
            self.trades.settled(uid)
            return  # already recorded (the extender's own bind): nothing changes
        if rec is not None and self.trades.offer(key, uid, obj, alloc):
            return  # one write of a trade: applied with its partner's
        self._record_bound(key, obj, alloc)

    def _record_bound(self, key: str, obj: dict[str, Any], alloc: PodAllocation) -> None:
        m = meta(obj)
        held = self.state.pods.get(key)
        uid = str(m.get("uid") or "")
        if held is not None and held.hold is None and held.allocation == alloc and (
                not uid or not held.pod.uid or held.pod.uid == uid):
            # the extender's own bind, seen before its Binding's answer: the state holds this very
            # allocation for this pod, so recording it only marks it bound, whatever the pod's request
            # reads (the request of its pending version is kept): not parsed again
            pod = held.pod
        else:
            try:
                pod = parse_pod(obj)
            except InvalidInput as e:
                # the allocation is still the truth: record it with what we know of the pod
                log.warning("pod %s: request does not parse (%s); recording its allocation anyway", key, e)
                pod = PodRequest(namespace=str(m.get("namespace", "")), name=str(m.get("name", "")), uid=uid)
        self._order[key] = bound_order(obj)
        self._waiting.pop(key, None)
        left = held.allocation.node if held is not None and held.allocation.node != alloc.node else None
        reason = self.state.add_bound_checked(pod, alloc)
        if reason is None:
            self._refused.pop(key, None)
            for node in (alloc.node, left):  # a change on a node where a refused pod waits (or the one it left)
                if node is not None and any(w[2].node == node for w in self._waiting.values()):
                    self._rejudge(node)
            return
        self._waiting[key] = (obj, pod, alloc)
        while len(self._waiting) > REFUSED_KEPT:
            oldest = next(iter(self._waiting))
            del self._waiting[oldest]
            self._order.pop(oldest, None)
        self._rejudge(alloc.node)  # reports it, unless an earlier allocation's change let it in

    def _forget_bound(self, key: str, node: str) -> None:
        """``key`` left ``node``: a pod refused there may fit now."""
        self._order.pop(key, None)
        self._waiting.pop(key, None)
        if any(w[2].node == node for w in self._waiting.values()):
            self._rejudge(node)

    def _rejudge(self, node: str) -> None:
        """Count the bound pods of ``node`` again in the order they got it, the earlier winning a
        card, as a fresh list would (:func:`bound_order`); the ones that do not fit wait."""
        entries: list[tuple[tuple[str, str, str], str, dict[str, Any] | None, PodRequest, PodAllocation]] = []
        for key, rec in list(self.state.pods.items()):
            # [takeover] pods other schedulers placed stay counted: they run there, whatever the order
            if rec.phase == "bound" and rec.hold is None and rec.peer is None and rec.allocation.node == node:
                entries.append((self._order.get(key, ("", "", key)), key, None, rec.pod, rec.allocation))
                self.state.release(key)
        for key, (obj, pod, alloc) in list(self._waiting.items()):
            if alloc.node == node:
                entries.append((self._order.get(key, ("", "", key)), key, obj, pod, alloc))
                del self._waiting[key]
        for _, key, obj, pod, alloc in sorted(entries, key=lambda e: (e[0], e[1])):
            reason = self.state.add_bound_checked(pod, alloc)
            if reason is None:
                self._refused.pop(key, None)
                continue
            if key not in self.state.pods:  # not counted on its cards, but on its node's CPU and memory
                self.state.set_plain(key, alloc.node, pod.cpu_milli, pod.memory_bytes)
            self._waiting[key] = (obj or {"metadata": {"namespace": pod.namespace, "name": pod.name,
                                                         "uid": pod.uid}}, pod, alloc)
            self._refused_report(key, self._waiting[key][0], reason)

    def _refused_report(self, key: str, obj: dict[str, Any], reason: str) -> None:
        """Count, log and report (once per pod and allocation) an allocation refused for over-booking."""
        m = meta(obj)
        alloc = self._waiting[key][2]
        seen = (str(m.get("uid") or ""), alloc)
        if self._refused.get(key) == seen:
            return  # already reported; judged again at each change on its node
        self.overbooked += 1
        self._refused[key] = seen
        while len(self._refused) > REFUSED_KEPT:
            self._refused.pop(next(iter(self._refused)))
        log.warning("pod %s carries an allocation that would over-book its devices; it is not counted: %s",
                    key, reason)
        self._report(obj, reason)

    def _report(self, obj: dict[str, Any], reason: str) -> None:
        """A Warning Event ``DeviceOverbooked`` on the pod (best effort, in the background)."""
        m = meta(obj)
        ns, name = str(m.get("namespace", "")), str(m.get("name", ""))
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{name}.", "namespace": ns},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name,
                               "uid": str(m.get("uid") or "")},
            "reason": OVERBOOKED_REASON, "type": "Warning",
            "message": (f"devshare refused the allocation written on this pod (annotation {ALLOCATION}): "
                        f"{reason}. Its devices are not counted; only devshare's scheduler may write allocations"),
            "source": {"component": "devshare-extender"}, "reportingComponent": "devshare-extender",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # a one-shot reconcile (no loop): logged and counted only
        task = loop.create_task(self._send_event(ns, event))
        self._event_tasks.add(task)
        task.add_done_callback(self._event_tasks.discard)

    async def _send_event(self, ns: str, event: dict[str, Any]) -> None:
        try:
            await self.backend.record_event(ns, event)
        except BackendError as e:
            log.info("could not record the %s event of %s/%s: %s", OVERBOOKED_REASON, ns,
                     event["involvedObject"]["name"], e)
