"""The cluster as the watch shows it, applied to the engine: what the informer (:mod:`devshare.kube.informer`)
lists and watches becomes nodes, devices and bound pods' allocations, by these rules.

The annotations of bound pods are the whole truth (DESIGN.md): every allocation is rebuilt from them,
through the one cache (:class:`~devshare.engine.lifecycle.Lifecycle`'s ``add_watched`` and
``remove_watched``).

Rules for pods:

- bound (``spec.nodeName``) with a decodable allocation annotation: recorded as bound;
- Succeeded/Failed or deleted: released (a pod in flight, "assumed", is released only when deleted);
- pending: nothing is recorded (the scheduler reserves it; an annotation on an unbound pod is not
  truth), but a pending pod of devshare's scheduler (``scheduler_name``) is kept as the watch last
  delivered it (:meth:`WatchedCluster.pending_pod`, at most ``MAX_PENDING``), so that a bind can decide
  from the pod as the API server has it without reading it again;
- every pod that exists is known by key and uid, and the pods of each group by group
  (:meth:`WatchedCluster.pod_exists`, :meth:`WatchedCluster.group_exists`): a group's plan holds devices
  only for pods that exist;
- a malformed annotation is logged and counted in :attr:`WatchedCluster.malformed`, never fatal;
- a changed allocation tagged ``devshare.io/trade`` (the node agent's trade of two identical pods)
  waits for its partner's write and is applied with it (:mod:`devshare.engine.trades`);
- an allocation that would book a card beyond its compute or memory is refused and not counted,
  logged, counted in :attr:`WatchedCluster.overbooked` and reported (``report``: the server writes a
  Warning Event ``DeviceOverbooked`` on the pod). While such a pod waits on its node, every change
  there (a pod leaving, an allocation changing) judges the node's bound pods again in the order they
  got it, the earlier winning a card: a refused pod is counted as soon as its card has room, and the
  state never depends on the order the events came in. A (re-)list applies pods in that same order,
  so a restart rebuilds the same state.

A re-list keeps the assumed pods (their bind may not be visible yet), and a bound pod missing from the
list is released only once the informer confirms it is gone (it may have been created and bound after
the list was taken).

This is also the extender's view of the cluster (:class:`~devshare.server.extender.view.ClusterView`):
whether the first list is in, the pending pods, which pods and groups exist, how far the watch of pods
has come, and the bound pods it holds back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.state import ClusterState
from devshare.engine.takeover import Inventories, PeerPods
from devshare.engine.trades import DEFAULT_TIMEOUT, Trades
from devshare.model.allocation import PodAllocation
from devshare.model.codecs import decode_allocation
from devshare.model.device import parse_device
from devshare.model.dra import is_claim_record
from devshare.model.errors import InvalidInput
from devshare.model.inventory import koordinator_device
from devshare.model.kubeobjects import TERMINAL_PHASES, meta, object_key
from devshare.model.names import GANG_NAME, GROUP_NAME
from devshare.model.node import parse_node
from devshare.model.pod import parse_pod
from devshare.model.podresources import pod_node_requests
from devshare.model.request import PodRequest
from devshare.model.usage import NodeUsage, parse_usage

log = logging.getLogger(__name__)

Obj = dict[str, Any]
REFUSED_KEPT = 4096  # refused pods remembered (to report each once)
# pending pods of devshare's scheduler kept from the watch (a pod's dict as decoded, a few KB each);
# when full, a new pending pod is not kept (its bind reads it from the API server), the older ones
# (scheduled first) stay
MAX_PENDING = 8192
Report = Callable[[Obj, str], None]  # (the pod, why its allocation is refused): a DeviceOverbooked Event


def is_bound(obj: Obj) -> bool:
    """A pod that holds its node: bound, neither deleted nor finished."""
    status = obj.get("status")
    phase = status.get("phase") if isinstance(status, dict) else None
    spec = obj.get("spec")
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    return phase not in TERMINAL_PHASES and isinstance(node, str) and bool(node)


def bound_order(obj: Obj) -> tuple[str, str, str]:
    """When a pod got its node, as well as the API tells (its PodScheduled condition, else its
    creation), to rebuild in the order the allocations were made: the earlier wins a card."""
    m = meta(obj)
    created = str(m.get("creationTimestamp") or "")
    scheduled = ""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "True":
            scheduled = str(c.get("lastTransitionTime") or "")
    return (scheduled or created, created, object_key(obj))


class WatchedCluster:
    """The informer's objects applied to ``lifecycle``'s state. ``clock``: seconds (trades' timeout);
    ``report(pod, reason)``: an allocation refused for over-booking (once per pod and allocation)."""

    def __init__(self, lifecycle: Lifecycle, *, clock: Callable[[], float], report: Report | None = None,
                 scheduler_name: str | None = None, track_node_resources: bool = True,
                 trade_timeout: float = DEFAULT_TIMEOUT) -> None:
        self.lifecycle = lifecycle
        self.state: ClusterState = lifecycle.state
        self.report = report
        # pending pods with this spec.schedulerName are kept from the watch (None: none are kept)
        self.scheduler_name = scheduler_name
        self.track_node_resources = track_node_resources
        self.pending: dict[str, Obj] = {}
        self.usage: dict[str, NodeUsage] = {}  # node -> what its GPUs use: its Device's status.usage (/ui)
        self.synced = False  # every kind listed once
        self.versions: dict[str, str] = {}  # how far the watch of each kind has come
        # counters (exported as metrics by the server)
        self.malformed = 0  # bound pods whose allocation annotation could not be used
        self.invalid_objects = 0  # Nodes/Devices that did not parse (the previous view is kept)
        # bound pods whose allocation would have over-booked a card: refused, not counted (each refusal
        # of a change of the pod counts once)
        self.overbooked = 0
        self._refused: dict[str, tuple[str, PodAllocation]] = {}
        # the refused ones still on their node, with what re-judging them needs; and when each bound pod
        # got its node (bound_order): a node holding a refused pod is judged again in that order at each
        # change on it
        self._waiting: dict[str, tuple[Obj, PodRequest, PodAllocation]] = {}
        self._order: dict[str, tuple[str, str, str]] = {}
        # every pod that exists (not deleted, not finished), key -> uid, and the pods of each group
        # (``<ns>/<group>`` -> keys)
        self.pods_present: dict[str, str] = {}
        self.group_pods: dict[str, set[str]] = {}
        self._group_of: dict[str, str] = {}
        # the node agent's trades: a tagged write waits for its partner's (devshare.engine.trades)
        self.trades = Trades(lifecycle, self._record_bound, clock=clock, timeout=trade_timeout)
        # taking over: peers' inventories beside devshare's Device, and pods other schedulers placed
        self.peer_pods = PeerPods(lifecycle)
        self.inventories = Inventories(self.state, self.peer_pods.node_changed)

    # ------------------------------------------------------------------ the informer's handler
    def listed(self, kind: str, items: list[Obj], *, initial: bool) -> list[str]:
        """Apply a full list; on a re-list, also drop the nodes and devices no longer there. Returns the
        pods held (not assumed) that the list lacks: the informer confirms each."""
        vanished: list[str] = []
        present = {object_key(o) for o in items}
        if not initial:
            if kind == "nodes":
                for name in [n for n in self.state.nodes if n not in present]:
                    self._apply_node("DELETED", {"metadata": {"name": name}})
            elif kind in ("devices", "koorddevices"):  # each source of inventories on its own
                source = "devshare" if kind == "devices" else "koordinator"
                for name in [n for n, found in self.inventories.sources.items()
                             if found.get(source) is not None and n not in present]:
                    self._drop_device(name, source)
            elif kind == "pods":
                for key in [k for k in self.pods_present if k not in present]:
                    self._absent(key)
                for key in [k for k in self.pending if k not in present]:
                    del self.pending[key]
                # (DRA: a claim's record is the DRA controller's to keep, never a vanished pod's)
                vanished = [k for k, r in self.state.pods.items()
                            if k not in present and r.phase != "assumed" and not is_claim_record(k)]
        if kind == "pods":
            items = sorted(items, key=bound_order)
        for obj in items:
            self.changed(kind, "ADDED", obj)
        return vanished

    def changed(self, kind: str, type_: str, obj: Obj) -> None:
        if kind == "nodes":
            self._apply_node(type_, obj)
        elif kind == "devices":
            self._apply_device(type_, obj)
        elif kind == "koorddevices":
            self._apply_device(type_, obj, source="koordinator")
        elif kind == "pods":
            self._apply_pod(type_, obj)

    def progressed(self, kind: str, version: str, *, synced: bool) -> None:
        self.versions[kind] = version
        self.synced = synced

    # ------------------------------------------------------------------ the extender's view
    def watch_version(self) -> str | None:
        """How far the watch of pods has come (its resourceVersion)."""
        return self.versions.get("pods")

    def group_exists(self, group: str) -> bool:
        """Whether any pod of ``group`` (``<ns>/<name>``: the label or gang annotation) exists."""
        return bool(self.group_pods.get(group))

    def pod_exists(self, key: str, uid: str) -> bool:
        """Whether the pod ``key`` (of ``uid``, when given) exists, as the watch has it."""
        known = self.pods_present.get(key)
        return known is not None and (not uid or not known or known == uid)

    def uncounted(self, node: str) -> list[tuple[PodRequest, PodAllocation]]:
        """The bound pods of ``node`` the watch delivered but the state does not count: their allocations
        would over-book a card beside what it holds. They wait to be judged again; a claim counts them."""
        return [(pod, alloc) for _, pod, alloc in self._waiting.values() if alloc.node == node]

    def pending_pod(self, key: str) -> Obj | None:
        """The pending pod ``key`` of devshare's scheduler as the watch last delivered it (the API
        server's object, never a caller's), or None when it is not kept."""
        return self.pending.get(key)

    def note_pod(self, obj: Obj) -> None:
        """A pod read from the API server (fresher than the watch so far): applied as a change."""
        self._apply_pod("MODIFIED", obj)

    # ------------------------------------------------------------------ nodes and devices
    def _apply_node(self, type_: str, obj: Obj) -> None:
        name = str(meta(obj).get("name", ""))
        if type_ == "DELETED":
            self.state.remove_node(name)
            self.inventories.node_gone(name)
            return
        try:
            info = parse_node(obj, track_resources=self.track_node_resources)
        except InvalidInput as e:
            self.invalid_objects += 1
            log.warning("ignoring Node %s: %s", name, e)
            return
        self.state.upsert_node(info)
        self.inventories.node(obj)  # taking over: HAMi's and Volcano's registers, gpushare capacity

    def _apply_device(self, type_: str, obj: Obj, *, source: str = "devshare") -> None:
        """A Device object: devshare's, or Koordinator's as koordlet writes it (``source``
        "koordinator"), which is the node's inventory where it has no devshare Device."""
        name = str(meta(obj).get("name", ""))
        if type_ == "DELETED":
            self.inventories.unreadable(name, source, None)
            self._drop_device(name, source)  # another source may stand in
            return
        if source == "devshare":
            self._apply_usage(name, obj)
        try:
            nd = parse_device(obj) if source == "devshare" else koordinator_device(obj)
        except InvalidInput as e:
            self.invalid_objects += 1
            log.warning("ignoring %s %s (keeping what it said before): %s",
                        "Device" if source == "devshare" else "Koordinator's Device", name, e)
            self.inventories.unreadable(name, source, str(e))
            return
        self.inventories.unreadable(name, source, None)
        self.inventories.set(name, source, nd)

    def _drop_device(self, name: str, source: str) -> None:
        self.inventories.set(name, source, None)
        if source == "devshare":
            self.usage.pop(name, None)

    def _apply_usage(self, name: str, obj: Obj) -> None:
        """The usage the node's agent wrote (``status.usage``); a bad block is dropped, not the Device."""
        self.usage.pop(name, None)
        try:
            usage = parse_usage(obj)
        except InvalidInput as e:
            log.warning("ignoring the usage of Device %s: %s", name, e)
            return
        if usage is not None:
            self.usage[name] = usage

    # ------------------------------------------------------------------ pods
    def _present(self, key: str, uid: str, obj: Obj) -> None:
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
        self.lifecycle.uncount_plain(key)
        old = self._group_of.pop(key, "")
        if old:
            self._leave(key, old)

    def _leave(self, key: str, gkey: str) -> None:
        members = self.group_pods.get(gkey)
        if members is not None:
            members.discard(key)
            if not members:
                del self.group_pods[gkey]

    def _keep_pending(self, key: str, obj: Obj) -> None:
        if self.scheduler_name is None or (obj.get("spec") or {}).get("schedulerName") != self.scheduler_name:
            self.pending.pop(key, None)
            return
        if key in self.pending or len(self.pending) < MAX_PENDING:
            self.pending[key] = obj

    def _apply_pod(self, type_: str, obj: Obj) -> None:
        self._apply_allocation(type_, obj)
        self._count_plain(type_, obj)

    def _count_plain(self, type_: str, obj: Obj) -> None:
        """A bound pod that holds no record (another scheduler's, one asking for no device, one whose
        allocation is not counted) still takes CPU and memory of its node: counted, so that the engine
        sees each node's CPU and memory as kube-scheduler does (issue 41)."""
        key = object_key(obj)
        if type_ == "DELETED" or not is_bound(obj) or key not in self.pods_present or key in self.state.pods:
            self.lifecycle.uncount_plain(key)  # gone, finished, pending, or counted through its record
        else:
            self.lifecycle.count_plain(key, str((obj.get("spec") or {}).get("nodeName")), *pod_node_requests(obj))

    def _apply_allocation(self, type_: str, obj: Obj) -> None:
        m = meta(obj)
        key = object_key(obj)
        rec = self.state.pods.get(key)
        uid = str(m.get("uid") or "")
        if rec is not None and uid and rec.pod.uid and rec.pod.uid != uid:
            self.lifecycle.release(key)  # a new pod under an old name: the old one is gone
            self._forget_bound(key, rec.allocation.node)
            rec = None
        if type_ == "DELETED" or (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
            self.trades.gone(uid)
            self.peer_pods.forget(key)
            gone = self.lifecycle.remove_watched(key, uid)
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
            counted = self.peer_pods.apply(obj, node)  # its dialect's annotation, when it has one
            log.warning("pod %s: cannot use its allocation annotation: %s%s", key, e,
                        "; counted from its dialect's annotation" if counted else "")
            return
        if alloc is None:
            self.peer_pods.apply(obj, node)  # placed by another scheduler: counted from its annotations
            return
        if key in self.peer_pods.node_of:
            self.peer_pods.forget(key)  # devshare's own allocation now
        if alloc.node != node:
            self.malformed += 1
            counted = self.peer_pods.apply(obj, node)
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

    def _record_bound(self, key: str, obj: Obj, alloc: PodAllocation) -> None:
        m = meta(obj)
        held = self.state.pods.get(key)
        uid = str(m.get("uid") or "")
        if held is not None and held.group is None and held.allocation == alloc and (
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
        reason = self.lifecycle.add_watched(pod, alloc)
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
        entries: list[tuple[tuple[str, str, str], str, Obj | None, PodRequest, PodAllocation]] = []
        for key, rec in list(self.state.pods.items()):
            # pods other schedulers placed stay counted: they run there, whatever the order
            if rec.phase == "bound" and rec.group is None and rec.peer is None and rec.allocation.node == node:
                entries.append((self._order.get(key, ("", "", key)), key, None, rec.pod, rec.allocation))
                self.lifecycle.release(key)
        for key, (obj, pod, alloc) in list(self._waiting.items()):
            if alloc.node == node:
                entries.append((self._order.get(key, ("", "", key)), key, obj, pod, alloc))
                del self._waiting[key]
        for _, key, seen, pod, alloc in sorted(entries, key=lambda e: (e[0], e[1])):
            reason = self.lifecycle.add_watched(pod, alloc)
            if reason is None:
                self._refused.pop(key, None)
                continue
            if key not in self.state.pods:  # not counted on its cards, but on its node's CPU and memory
                self.lifecycle.count_plain(key, alloc.node, pod.cpu_milli, pod.memory_bytes)
            self._waiting[key] = (seen or {"metadata": {"namespace": pod.namespace, "name": pod.name,
                                                          "uid": pod.uid}}, pod, alloc)
            self._refused_report(key, self._waiting[key][0], reason)

    def _refused_report(self, key: str, obj: Obj, reason: str) -> None:
        """Count, log and report (once per pod and allocation) an allocation refused for over-booking."""
        alloc = self._waiting[key][2]
        seen = (str(meta(obj).get("uid") or ""), alloc)
        if self._refused.get(key) == seen:
            return  # already reported; judged again at each change on its node
        self.overbooked += 1
        self._refused[key] = seen
        while len(self._refused) > REFUSED_KEPT:
            self._refused.pop(next(iter(self._refused)))
        log.warning("pod %s carries an allocation that would over-book its devices; it is not counted: %s",
                    key, reason)
        if self.report is not None:
            self.report(obj, reason)
