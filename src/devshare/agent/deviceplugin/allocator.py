"""Serving Allocate calls: find the container (devshare.agent.matching), hand it its devices
(devshare.agent.envs), and mark the pod assigned once every container got its devices."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from pathlib import Path

from devshare.agent.checkpoint import read_checkpoint
from devshare.agent.client import AgentClient
from devshare.agent.envs import ContainerDevices, container_devices
from devshare.agent.inventory import Inventory
from devshare.agent.matching import ASSIGNED, AllocateError, PendingPod, Served, complete, match, pending_pod
from devshare.agent.resources import PluginResource
from devshare.model import names
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
    ) -> None:
        self.node = node
        self.client = client
        self.inventory = inventory
        self.resources = frozenset(resources)
        self.checkpoint = checkpoint
        self.served: Served = set()
        self._lock = threading.Lock()

    def _served(self) -> Served:
        served = set(self.served)
        if self.checkpoint is not None:
            try:
                for e in read_checkpoint(self.checkpoint):
                    if e.resource in self.resources:
                        served.add((e.pod_uid, e.container, e.resource))
            except InvalidInput as e:
                log.warning("cannot read kubelet's checkpoint: %s", e)
        return served

    def _pending(self) -> list[PendingPod]:
        out = []
        for p in self.client.list_node_pods(self.node):
            pod = pending_pod(p, node=self.node, resources=self.resources)
            if pod is not None:
                out.append(pod)
        return out

    def allocate(self, resource: PluginResource, requests: list[list[str]]) -> list[ContainerDevices]:
        """One answer per container request of the call; raises AllocateError (nothing is handed out)."""
        with self._lock:
            pods = self._pending()
            served = self._served()
            inv = self.inventory()
            answers: list[ContainerDevices] = []
            done: list[tuple[str, str, str]] = []
            matched: list[PendingPod] = []
            for ids in requests:
                m = match(resource.name, len(ids), pods, served)
                answers.append(container_devices(m.pod, m.container, inv, resource.device_type))
                key = (m.pod.uid, m.container, resource.name)
                served.add(key)
                done.append(key)
                matched.append(m.pod)
                log.info("Allocate %s x%d -> %s/%s: %s", resource.name, len(ids), m.pod.key, m.container,
                         answers[-1].envs.get("NVIDIA_VISIBLE_DEVICES", ""))
            self.served.update(done)
            for pod in {p.uid: p for p in matched}.values():
                if complete(pod, served, self.resources):
                    self._mark_assigned(pod)
            return answers

    def _mark_assigned(self, pod: PendingPod) -> None:
        marks = {ASSIGNED: "true"}
        if names.ALIYUN_ASSIGNED in pod.annotations or names.ALIYUN_IDX in pod.annotations:
            marks[names.ALIYUN_ASSIGNED] = "true"
        try:
            self.client.patch_pod_annotations(pod.namespace, pod.name, marks)
        except Exception:  # the container has its devices: keep serving, keep remembering the pod
            log.exception("could not mark %s assigned", pod.key)
            return
        # the mark now remembers it (the pod is no longer a candidate)
        self.served = {s for s in self.served if s[0] != pod.uid}


__all__ = ["AllocateError", "Allocator"]
