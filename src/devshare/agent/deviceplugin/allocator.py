"""Serving Allocate calls: find the container (devshare.agent.matching), hand it its devices
(devshare.agent.envs), and mark the pod assigned once every container got its devices.

Identical replicas: a call that matches several identical pending pods is served with the devices
of a stand-in (the first bound of them) and recorded as a :class:`~devshare.agent.journal.Handout`.
kubelet writes its checkpoint after each container's allocation, before it calls for the next
container, so the agent learns from it, at the next call or within a second (:meth:`tick`), which
pod got those devices. When that pod is not the stand-in, the two pods trade allocations
(:mod:`devshare.model.trade`): the agent owes two annotation writes, queued in the journal with the
pods' ``devshare.io/assigned`` marks after them, and until the API shows them it sees each pod
with the allocation it will have (the writes overlay the pods it lists). The journal is saved
before an Allocate answer leaves, so an agent restart loses no handout and no write.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from devshare.agent.checkpoint import CheckpointEntry, read_checkpoint
from devshare.agent.client import AgentClient, WriteRefused
from devshare.agent.deviceplugin.preferred import preferred_ids
from devshare.agent.envs import ContainerDevices, container_devices
from devshare.agent.inventory import Inventory
from devshare.agent.journal import MARK, Handout, Journal, Write
from devshare.agent.matching import (
    ASSIGNED,
    AllocateError,
    PendingPod,
    Served,
    complete,
    identical,
    match,
    pending_pod,
)
from devshare.agent.resources import PluginResource
from devshare.model import trade
from devshare.model.allocation import DeviceGrant
from devshare.model.dialects import aliyun
from devshare.model.errors import InvalidInput

log = logging.getLogger("devshare.agent.allocate")

TERMINAL = ("Succeeded", "Failed")
HANDOUT_TTL = 600.0  # s: a handout kubelet's checkpoint never showed is dropped after this


class Allocator:
    """Maps Allocate calls to containers; shared by every plugin of the node (one lock)."""

    def __init__(
        self,
        node: str,
        client: AgentClient,
        inventory: Callable[[], Inventory],
        *,
        resources: Collection[str],
        checkpoint: Path | None = None,
        journal: Path | None = None,
        progress_window: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.node = node
        self.client = client
        self.inventory = inventory
        self.resources = frozenset(resources)
        self.checkpoint = checkpoint
        # stand-ins need kubelet's checkpoint to learn which pod a handout went to
        self.standins = checkpoint is not None
        self.readable = checkpoint is not None
        self.journal = Journal(journal)
        self.progress_window = progress_window
        self.clock = clock
        self.wall = wall
        self.served: Served = {(h.standin, h.container, h.resource) for h in self.journal.handouts}
        self.last_call: dict[str, float] = {}  # pod uid -> when one of its containers was last served
        self.abandoned: set[str] = set()  # pods whose admission failed half-way
        # pods served but not complete yet: kubelet's checkpoint may complete them after the last call
        # (the container's other resources were served before an agent restart)
        self.unmarked: set[str] = set()
        self.trades = 0  # trades made (a stand-in that was not the pod kubelet admitted)
        self._checkpoint_state = ""  # missing | unreadable | read: the last state logged
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ what kubelet and the API say
    def _entries(self) -> list[CheckpointEntry]:
        """kubelet's checkpoint entries of the resources served here, read again at every call (so a
        checkpoint that appears after the agent started, or that a restarted kubelet rewrote, is
        seen). ``readable`` tells whether it could be read: stand-ins are only used while it can,
        else nothing would settle them. kubelet writes it as soon as a device plugin has listed its
        devices, so on a fresh node it exists before the first Allocate."""
        self.readable = False
        if self.checkpoint is None:
            return []
        try:
            entries = [e for e in read_checkpoint(self.checkpoint, missing_ok=False) if e.resource in self.resources]
        except FileNotFoundError:
            self._checkpoint_seen("missing", "kubelet's checkpoint %s does not exist (yet): identical pods are "
                                  "refused until it appears (is kubelet's device plugin directory mounted?)")
            return []
        except InvalidInput as e:
            self._checkpoint_seen("unreadable", f"cannot read kubelet's checkpoint %s (identical pods are refused "
                                  f"meanwhile): {e}")
            return []
        self._checkpoint_seen("read", "reading kubelet's checkpoint %s: identical pods are served with stand-ins")
        self.readable = True
        return entries

    def _checkpoint_seen(self, state: str, message: str) -> None:
        """Log a change in the checkpoint's state (missing, unreadable, read), once per change."""
        if state != self._checkpoint_state:
            level = logging.INFO if state == "read" or self._checkpoint_state == "" else logging.WARNING
            log.log(level, message, self.checkpoint)
            self._checkpoint_state = state

    def _progress(self, entries: list[CheckpointEntry]) -> tuple[Served, set[str]]:
        """(what was allocated, the pods kubelet is in the middle of)."""
        served = set(self.served)
        now = self.clock()
        started = {uid for uid, t in self.last_call.items() if now - t <= self.progress_window}
        started.update(h.standin for h in self.journal.handouts)
        for e in entries:
            served.add((e.pod_uid, e.container, e.resource))
            if e.pod_uid not in self.last_call:  # learnt after a restart
                started.add(e.pod_uid)
        return served, started - self.abandoned

    def _overlaid(self, pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The node's pods with the annotation writes still owed applied (what they will be)."""
        owed: dict[str, list[Write]] = {}
        for w in self.journal.writes:
            owed.setdefault(w.uid, []).append(w)
        if not owed:
            return pods
        out = []
        for p in pods:
            meta = p.get("metadata") or {}
            writes = owed.get(str(meta.get("uid", "")))
            if writes:
                annotations = dict(meta.get("annotations") or {})
                for w in writes:
                    for k, v in w.annotations.items():
                        if v is None:
                            annotations.pop(k, None)
                        else:
                            annotations[k] = v
                p = {**p, "metadata": {**meta, "annotations": annotations}}
            out.append(p)
        return out

    def _pending(self, pods: list[dict[str, Any]]) -> list[PendingPod]:
        out = []
        for p in pods:
            pod = pending_pod(p, node=self.node, resources=self.resources)
            if pod is not None and pod.uid not in self.abandoned:
                out.append(pod)
        return out

    # ------------------------------------------------------------------ Allocate
    def _prepare(self, resource: PluginResource) -> tuple[list[PendingPod], Served, set[str]]:
        """What a call for ``resource`` is matched against: the pending pods (as the writes owed leave
        them), what was allocated, and the pods kubelet is in the middle of. Settles first what
        kubelet's checkpoint shows of earlier handouts (the trades are written before anything else)."""
        api = self.client.list_node_pods(self.node)
        entries = self._entries()
        resolved = self._resolve(entries, self._overlaid(api))
        raw = self._overlaid(api)  # the pods as the writes owed leave them
        if resolved:
            self.journal.save()  # a trade's two writes are owed before the first is made
            self._flush()  # the trade's writes first: the webhook checks each against the API's pods
        self._drop_stale(resource.name)
        served, started = self._progress(entries)
        return self._pending(raw), served, started

    def preferred(self, resource: PluginResource, requests: list[tuple[list[str], list[str], int]]) -> list[list[str]]:
        """kubelet's GetPreferredAllocation: per container request (available ids, ids it must
        include, how many), the ids to pick: those of the devices the container's allocation names,
        as many of each as its share of each (:func:`~devshare.agent.deviceplugin.preferred.preferred_ids`),
        so that kubelet's checkpoint and its pod-resources API name the cards the container really
        gets. The container is the one the following Allocate will be matched to (the same rules,
        nothing recorded); when none matches, kubelet's own pick (the Allocate will say why)."""
        with self._lock:
            pods, served, started = self._prepare(resource)
            inv = self.inventory()
            out: list[list[str]] = []
            for available, must, size in requests:
                grants: list[DeviceGrant] = []
                try:
                    m = match(resource.name, size, pods, served, started, standins=self.standins and self.readable)
                    grants = [g for c in m.pod.allocation.containers if c.name == m.container for g in c.devices
                              if g.type == resource.device_type]
                    served = served | {(m.pod.uid, m.container, resource.name)}
                except AllocateError:
                    pass
                out.append(preferred_ids(resource, inv, grants, available, must, size))
            return out

    def allocate(self, resource: PluginResource, requests: list[list[str]]) -> list[ContainerDevices]:
        """One answer per container request of the call; raises AllocateError (nothing is handed out)."""
        with self._lock:
            pods, served, started = self._prepare(resource)
            inv = self.inventory()
            answers: list[ContainerDevices] = []
            done: list[tuple[str, str, str]] = []
            matched: list[PendingPod] = []
            handouts: list[Handout] = []
            pending_handouts = {h.standin for h in self.journal.handouts}
            for ids in requests:
                try:
                    m = match(resource.name, len(ids), pods, served, started,
                              standins=self.standins and self.readable)
                    answers.append(container_devices(m.pod, m.container, inv, resource.device_type))
                except AllocateError:
                    # kubelet fails the pod it was admitting: whatever was half-way is dead (a stand-in's
                    # handouts were some other pod's: that one is dead, the stand-in is not)
                    tentative = self._tentative()
                    self._forget_handouts(list(self.journal.handouts))
                    self.abandoned.update(self._half_way(pods, served - tentative))
                    self.last_call.clear()
                    self.journal.save()
                    raise
                key = (m.pod.uid, m.container, resource.name)
                served.add(key)
                done.append(key)
                matched.append(m.pod)
                if m.standin or m.pod.uid in pending_handouts:  # whose it is, kubelet's checkpoint will tell
                    handouts.append(Handout(resource=resource.name, ids=tuple(sorted(ids)), standin=m.pod.uid,
                                            container=m.container, at=self.wall()))
                    pending_handouts.add(m.pod.uid)
                log.info("Allocate %s x%d -> %s/%s%s: %s", resource.name, len(ids), m.pod.key, m.container,
                         " (stand-in)" if m.standin else "", answers[-1].envs.get("NVIDIA_VISIBLE_DEVICES", ""))
            self.served.update(done)
            now = self.clock()
            current = {p.uid for p in matched}
            for uid in current:
                self.last_call[uid] = now
            # kubelet admits one pod at a time: any other half-allocated pod was given up, and so was the
            # pod behind another stand-in's handouts kubelet never recorded
            tentative = self._tentative()
            self._forget_handouts([h for h in self.journal.handouts if h.standin not in current])
            self.journal.handouts.extend(handouts)
            self.abandoned.update(self._half_way(pods, served - tentative) - current)
            pending_uids = {p.uid for p in pods}
            self.abandoned &= pending_uids | current
            for pod in {p.uid: p for p in matched}.values():
                if pod.uid not in pending_handouts and complete(pod, served, self.resources):
                    self._owe_mark(pod)
                else:
                    self.unmarked.add(pod.uid)
            self.unmarked -= self.abandoned
            self.journal.save()  # before the answer leaves: a restart must know these handouts
            self._flush()
            return answers

    def _tentative(self) -> Served:
        """What the handouts not matched to their pod yet count as served (for their stand-in)."""
        return {(h.standin, h.container, h.resource) for h in self.journal.handouts}

    def _half_way(self, pods: list[PendingPod], served: Served) -> set[str]:
        """The pending pods some of whose containers were served, not all (complete ones only wait
        for their mark)."""
        by_uid = {p.uid: p for p in pods}
        return {uid for uid in {s[0] for s in served}
                if uid in by_uid and not complete(by_uid[uid], served, self.resources)}

    def tick(self) -> None:
        """Resolve handouts and apply owed writes without waiting for the next Allocate (the last pod
        of a batch has no next call). Cheap when nothing is in flight."""
        with self._lock:
            if not self.journal.handouts and not self.journal.writes and not self.unmarked:
                return
            if self.journal.handouts or self.unmarked:
                raw = self._overlaid(self.client.list_node_pods(self.node))
                entries = self._entries()
                self._resolve(entries, raw)
                self._complete_unmarked(entries, self._overlaid(raw))
            self.journal.save()
            self._flush()

    def kubelet_restarted(self) -> None:
        """kubelet restarted (its socket was recreated). What it had recorded survives in its
        checkpoint, which it read back; an Allocate it got an answer to but had not recorded yet (it
        writes after each container) is made again by the new kubelet. So: settle the handouts the
        checkpoint shows, forget what was served that it does not confirm (the new kubelet asks for
        it again) and which pod was in the middle or given up (the new kubelet starts afresh)."""
        with self._lock:
            raw = self._overlaid(self.client.list_node_pods(self.node))
            entries = self._entries()
            self._resolve(entries, raw)
            confirmed = {(e.pod_uid, e.container, e.resource) for e in entries}
            dropped = len(self.journal.handouts) + len(self.served - confirmed)
            self._forget_handouts(list(self.journal.handouts))
            self.served &= confirmed
            self.last_call.clear()
            self.abandoned.clear()
            if dropped:
                log.info("kubelet restarted: forgetting %d allocation(s) its checkpoint does not show (it will ask "
                         "again)", dropped)
            self.journal.save()
            self._flush()

    def _complete_unmarked(self, entries: list[CheckpointEntry], raw: list[dict[str, Any]]) -> None:
        waiting = {h.standin for h in self.journal.handouts}
        served, _ = self._progress(entries)
        pods = {}
        for p in raw:
            if str((p.get("metadata") or {}).get("uid", "")) in self.unmarked:
                pod = pending_pod(p, node=self.node, resources=self.resources, any_phase=True)
                if pod is not None and pod.annotations.get(ASSIGNED) != "true":
                    pods[pod.uid] = pod
        for uid in list(self.unmarked):
            pod = pods.get(uid)
            if pod is None:  # assigned, or gone
                self.unmarked.discard(uid)
            elif uid not in waiting and complete(pod, served, self.resources):
                self._owe_mark(pod)
                self.unmarked.discard(uid)

    # ------------------------------------------------------------------ handouts -> trades
    def _resolve(self, entries: list[CheckpointEntry], raw: list[dict[str, Any]]) -> bool:
        """Match handouts to kubelet's checkpoint; owe a trade for each that went to another pod than
        its stand-in, and the mark of each pod now complete. True when writes were added."""
        if not self.journal.handouts:
            return False
        where = {(e.resource, tuple(sorted(e.device_ids))): e for e in entries}
        resolved: dict[str, set[str]] = {}  # real pod uid -> the stand-ins whose devices it got
        now = self.wall()
        for h in list(self.journal.handouts):
            e = where.get((h.resource, h.ids))
            if e is None:
                if now - h.at > HANDOUT_TTL:
                    log.warning("kubelet never recorded the %s handed out as %s's; forgetting it", h.resource,
                                h.standin)
                    self._forget_handouts([h])
                continue
            self._forget_handouts([h])
            resolved.setdefault(e.pod_uid, set()).add(h.standin)
        if not resolved:
            return False
        before = len(self.journal.writes)
        live = {str((p.get("metadata") or {}).get("uid", "")): p for p in raw
                if not (p.get("metadata") or {}).get("deletionTimestamp")
                and (p.get("status") or {}).get("phase") not in TERMINAL}
        served, _ = self._progress(entries)
        for real, standins in resolved.items():
            if len(standins) > 1:
                log.error("pod %s got the devices of several pods (%s): kubelet interleaved pods, which it never "
                          "does; its annotation cannot be corrected", real, ", ".join(sorted(standins)))
                continue
            (standin,) = standins
            if real not in live:
                continue  # gone, or failed admission: nothing to correct
            if real != standin and not self._trade(live[real], live.get(standin)):
                continue
            pod = pending_pod(self._overlaid([live[real]])[0], node=self.node, resources=self.resources,
                              any_phase=True)
            if pod is not None and pod.annotations.get(ASSIGNED) != "true" and complete(pod, served, self.resources):
                self._owe_mark(pod)
        return len(self.journal.writes) > before

    def _trade(self, real: dict[str, Any], standin: dict[str, Any] | None) -> bool:
        """Owe the two writes by which ``real`` (whose container got ``standin``'s devices) and
        ``standin`` exchange allocations."""
        r_meta = real.get("metadata") or {}
        r_uid, r_key = str(r_meta.get("uid", "")), f"{r_meta.get('namespace', '')}/{r_meta.get('name', '')}"
        if standin is None:
            log.error("pod %s got the devices of a pod that is gone since; its annotation still names its own "
                      "devices", r_key)
            return False
        s_meta = standin.get("metadata") or {}
        s_uid, s_key = str(s_meta.get("uid", "")), f"{s_meta.get('namespace', '')}/{s_meta.get('name', '')}"
        a = pending_pod(real, node=self.node, resources=self.resources, any_phase=True)
        b = pending_pod(standin, node=self.node, resources=self.resources, any_phase=True)
        if a is None or b is None or not identical(a, b):
            log.error("pod %s got the devices of %s, which asks for something else; cannot trade", r_key, s_key)
            return False
        r_ann, s_ann = r_meta.get("annotations") or {}, s_meta.get("annotations") or {}
        self.journal.writes.append(Write(uid=r_uid, namespace=str(r_meta.get("namespace", "")),
                                         name=str(r_meta.get("name", "")), annotations=trade.leg(r_ann, s_ann, s_uid),
                                         why=f"trade with {s_key}"))
        self.journal.writes.append(Write(uid=s_uid, namespace=str(s_meta.get("namespace", "")),
                                         name=str(s_meta.get("name", "")), annotations=trade.leg(s_ann, r_ann, r_uid),
                                         why=f"trade with {r_key}"))
        self.last_call.pop(s_uid, None)
        self.trades += 1
        log.info("kubelet admitted %s where %s stood in: the two trade allocations", r_key, s_key)
        return True

    def _forget_handouts(self, handouts: list[Handout]) -> None:
        for h in handouts:
            if h in self.journal.handouts:
                self.journal.handouts.remove(h)
            if not any(o.standin == h.standin and o.container == h.container and o.resource == h.resource
                       for o in self.journal.handouts):
                self.served.discard((h.standin, h.container, h.resource))

    def _drop_stale(self, resource: str) -> None:
        """Handouts of ``resource`` still unresolved when kubelet calls for it again are dead: kubelet
        calls once per container and resource, and writes its checkpoint before the next container."""
        stale = [h for h in self.journal.handouts if h.resource == resource]
        if stale:
            log.info("dropping %d handout(s) of %s kubelet never recorded (their pod failed admission)",
                     len(stale), resource)
            self._forget_handouts(stale)

    # ------------------------------------------------------------------ writes
    def _owe_mark(self, pod: PendingPod) -> None:
        marks: dict[str, str | None] = {ASSIGNED: "true"}
        if aliyun.ALIYUN_ASSIGNED in pod.annotations or aliyun.ALIYUN_IDX in pod.annotations:
            marks[aliyun.ALIYUN_ASSIGNED] = "true"
        if any(w.uid == pod.uid and w.annotations.get(ASSIGNED) for w in self.journal.writes):
            return
        self.journal.writes.append(Write(uid=pod.uid, namespace=pod.namespace, name=pod.name, annotations=marks,
                                         why=MARK))

    def _flush(self) -> None:
        """Apply the owed writes in order; stop at the first that fails for a passing reason (retried
        at the next call or tick). A write to a pod that is gone, or that the API refuses, is dropped.
        The journal is saved before (a trade is owed on disk before its first write is made), not
        after: a write made again after a restart changes nothing."""
        while self.journal.writes:
            w = self.journal.writes[0]
            try:
                self.client.patch_pod_annotations(w.namespace, w.name, w.annotations, uid=w.uid)
            except LookupError:
                log.info("pod %s/%s is gone: dropping its write (%s)", w.namespace, w.name, w.why)
            except WriteRefused as e:
                log.error("the API refused the write of pod %s/%s (%s): %s", w.namespace, w.name, w.why, e)
            except Exception as e:  # the container has its devices: keep serving, retry the write later
                log.warning("could not write pod %s/%s (%s), will retry: %s", w.namespace, w.name, w.why, e)
                break
            self.journal.writes.pop(0)
            if w.annotations.get(ASSIGNED) == "true":
                self.unmarked.discard(w.uid)
                # the mark now remembers it (the pod is no longer a candidate)
                self.served = {s for s in self.served if s[0] != w.uid}
                self.last_call.pop(w.uid, None)


__all__ = ["AllocateError", "Allocator"]
