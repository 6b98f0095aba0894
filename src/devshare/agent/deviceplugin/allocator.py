"""Serving Allocate calls: find the container (devshare.agent.matching), hand it its devices
(devshare.agent.envs), and mark the pod assigned once every container got its devices."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path

from devshare.agent.checkpoint import read_checkpoint
from devshare.agent.client import AgentClient
from devshare.agent.envs import ContainerDevices, container_devices
from devshare.agent.inventory import Inventory
from devshare.agent.matching import ASSIGNED, AllocateError, PendingPod, Served, complete, match, pending_pod
from devshare.agent.resources import PluginResource
from devshare.model.dialects import aliyun
from devshare.model.errors import InvalidInput

log = logging.getLogger("devshare.agent.allocate")


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
        progress_window: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node = node
        self.client = client
        self.inventory = inventory
        self.resources = frozenset(resources)
        self.checkpoint = checkpoint
        self.progress_window = progress_window
        self.clock = clock
        self.served: Served = set()
        self.last_call: dict[str, float] = {}  # pod uid -> when one of its containers was last served
        self.abandoned: set[str] = set()  # pods whose admission failed half-way
        self._lock = threading.Lock()

    def _served(self) -> tuple[Served, set[str]]:
        """(what was allocated, the pods kubelet is in the middle of)."""
        served = set(self.served)
        now = self.clock()
        started = {uid for uid, t in self.last_call.items() if now - t <= self.progress_window}
        if self.checkpoint is not None:
            try:
                for e in read_checkpoint(self.checkpoint):
                    if e.resource in self.resources:
                        served.add((e.pod_uid, e.container, e.resource))
                        if e.pod_uid not in self.last_call:  # learnt after a restart
                            started.add(e.pod_uid)
            except InvalidInput as e:
                log.warning("cannot read kubelet's checkpoint: %s", e)
        return served, started - self.abandoned

    def _pending(self) -> list[PendingPod]:
        out = []
        for p in self.client.list_node_pods(self.node):
            pod = pending_pod(p, node=self.node, resources=self.resources)
            if pod is not None and pod.uid not in self.abandoned:
                out.append(pod)
        return out

    def allocate(self, resource: PluginResource, requests: list[list[str]]) -> list[ContainerDevices]:
        """One answer per container request of the call; raises AllocateError (nothing is handed out)."""
        with self._lock:
            pods = self._pending()
            served, started = self._served()
            inv = self.inventory()
            answers: list[ContainerDevices] = []
            done: list[tuple[str, str, str]] = []
            matched: list[PendingPod] = []
            for ids in requests:
                try:
                    m = match(resource.name, len(ids), pods, served, started)
                    answers.append(container_devices(m.pod, m.container, inv, resource.device_type))
                except AllocateError:
                    # kubelet fails the pod it was admitting: whatever was half-way is dead
                    self.abandoned.update(uid for uid, _, _ in served)
                    self.last_call.clear()
                    raise
                key = (m.pod.uid, m.container, resource.name)
                served.add(key)
                done.append(key)
                matched.append(m.pod)
                log.info("Allocate %s x%d -> %s/%s: %s", resource.name, len(ids), m.pod.key, m.container,
                         answers[-1].envs.get("NVIDIA_VISIBLE_DEVICES", ""))
            self.served.update(done)
            now = self.clock()
            current = {p.uid for p in matched}
            for uid in current:
                self.last_call[uid] = now
            # kubelet admits one pod at a time: any other half-allocated pod was given up
            self.abandoned.update(uid for uid, _, _ in served if uid not in current)
            pending_uids = {p.uid for p in pods}
            self.abandoned &= pending_uids | current
            for pod in {p.uid: p for p in matched}.values():
                if complete(pod, served, self.resources):
                    self._mark_assigned(pod)
            return answers

    def _mark_assigned(self, pod: PendingPod) -> None:
        marks = {ASSIGNED: "true"}
        if aliyun.ALIYUN_ASSIGNED in pod.annotations or aliyun.ALIYUN_IDX in pod.annotations:
            marks[aliyun.ALIYUN_ASSIGNED] = "true"
        try:
            self.client.patch_pod_annotations(pod.namespace, pod.name, marks)
        except Exception:  # the container has its devices: keep serving, keep remembering the pod
            log.exception("could not mark %s assigned", pod.key)
            return
        # the mark now remembers it (the pod is no longer a candidate)
        self.served = {s for s in self.served if s[0] != pod.uid}
        self.last_call.pop(pod.uid, None)


__all__ = ["AllocateError", "Allocator"]
