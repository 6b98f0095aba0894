"""The reporter: keeps the node's Device object and extended resources up to date.

Each round it discovers the devices, builds the Device object (DESIGN.md shape: spec.devices,
spec.topologies.gpu bandwidth matrix, the GPU model, driver and vendor labels of
:mod:`devshare.agent.labels`, and the ``node.koordinator.sh/devices-checkpoints`` annotation listing
the cards another device plugin already handed out), and publishes it when it changed; the same
labels go on the Node. A card that was reported before and is gone now stays in the object, unhealthy, so the
scheduler stops using it instead of losing track of what was placed on it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import msgspec

from devshare.agent.checkpoint import held_outside, read_checkpoint
from devshare.agent.client import AgentClient
from devshare.agent.inventory import Backend, Inventory
from devshare.agent.labels import gpu_labels
from devshare.agent.resources import status_resources
from devshare.model import names
from devshare.model.device import DeviceInfo, NodeDevices, device_object, parse_device
from devshare.model.errors import InvalidInput
from devshare.model.links import bandwidth_from_links
from devshare.model.request import WHOLE

log = logging.getLogger("devshare.agent.reporter")


def current_devices(inv: Inventory) -> list[DeviceInfo]:
    out = [
        DeviceInfo(type=names.GPU, minor=g.minor, id=g.uuid, health=g.healthy, core_milli=WHOLE,
                   memory=g.memory, model=g.model)
        for g in inv.gpus
    ]
    out.extend(DeviceInfo(type=d.type, minor=d.minor, id=d.id, health=d.healthy, core_milli=WHOLE) for d in inv.others)
    return out


def merge_vanished(now: list[DeviceInfo], previous: NodeDevices | None) -> list[DeviceInfo]:
    """``now`` plus the previously reported devices that are gone, marked unhealthy."""
    out = list(now)
    if previous is not None:
        present = {(d.type, d.id) for d in now}
        taken = {(d.type, d.minor) for d in now}
        for d in previous.devices:
            if (d.type, d.id) not in present and (d.type, d.minor) not in taken:
                out.append(msgspec.structs.replace(d, health=False))
    out.sort(key=lambda d: (d.type, d.minor))
    return out


def bandwidth(inv: Inventory, override: list[list[float]] | None) -> list[list[float]] | None:
    """The matrix over ``inv.gpus``: a measured override, the backend's own, or the link model."""
    n = len(inv.gpus)
    if override is not None:
        if len(override) != n:
            raise InvalidInput(f"the bandwidth matrix is {len(override)}x{len(override)} but the node has {n} GPUs",
                               field="--bandwidth")
        return [list(r) for r in override]
    if inv.bandwidth is not None:
        return [list(r) for r in inv.bandwidth]
    if n > 1 and inv.links:
        return bandwidth_from_links(n, inv.links)
    return None


def node_devices(node: str, inv: Inventory, *, previous: NodeDevices | None = None,
                 override: list[list[float]] | None = None) -> NodeDevices:
    devices = merge_vanished(current_devices(inv), previous)
    matrix = bandwidth(inv, override)
    gpu_minors = [d.minor for d in devices if d.type == names.GPU]
    full = None
    if matrix is not None:
        pos = {g.minor: i for i, g in enumerate(inv.gpus)}
        full = tuple(
            tuple(
                matrix[pos[a]][pos[b]] if a in pos and b in pos else 0.0 for b in gpu_minors
            )
            for a in gpu_minors
        )
    return NodeDevices(node=node, devices=tuple(devices), gpu_bandwidth=full)


class Reporter:
    """Discovers, builds and publishes the node's Device object and extended resources."""

    def __init__(
        self,
        backend: Backend,
        node: str,
        *,
        client: AgentClient | None = None,
        override: list[list[float]] | None = None,
        checkpoint: Path | None = None,
        own_resources: Collection[str] = (),
        status_extra: tuple[str, ...] = (),
        label_node: bool = True,
    ) -> None:
        self.backend = backend
        self.node = node
        self.client = client
        self.override = override
        self.checkpoint = checkpoint
        self.own_resources = tuple(own_resources)
        self.status_extra = status_extra
        self.label_node = label_node  # put the GPU labels (devshare.agent.labels) on the Node
        self.published_labels: dict[str, str | None] | None = None
        self._label_failures = 0
        self.previous: NodeDevices | None = None
        self.inventory = Inventory()
        self.published: dict[str, Any] | None = None
        self.published_status: tuple[dict[str, str], dict[str, str]] | None = None
        self._lock = threading.Lock()
        self._last_put = 0.0
        self.usage: Callable[[], dict[str, Any] | None] | None = None  # the Device's status.usage, when read
        self._pods: list[dict[str, Any]] | None = None  # the last listing of the node's pods

    def load_previous(self) -> None:
        """Start from the Device object already in the API (cards gone since are kept, unhealthy)."""
        if self.client is None:
            return
        obj = self.client.get_device(self.node)
        if obj is not None:
            try:
                self.previous = parse_device(obj)
            except InvalidInput as e:
                log.warning("ignoring the existing Device %s: %s", self.node, e)

    def build(self) -> dict[str, Any]:
        """Discover and build the Device object (no I/O to the API besides listing pods)."""
        inv = self.backend.discover()
        nd = node_devices(self.node, inv, previous=self.previous, override=self.override)
        annotations: dict[str, str] = {}
        if self.checkpoint is not None:
            live: set[str] | None = None
            ours: set[str] = set()
            if self.client is not None:
                live = set()
                for p in self.node_pods(fresh=True):
                    meta = p.get("metadata") or {}
                    if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                        continue
                    live.add(str(meta.get("uid", "")))
                    if names.ALLOCATION in (meta.get("annotations") or {}):
                        ours.add(str(meta.get("uid", "")))
            try:
                entries = read_checkpoint(self.checkpoint)
            except InvalidInput as e:
                log.warning("cannot read kubelet's checkpoint: %s", e)
                entries = []
            held = held_outside(entries, known_ids={d.id for d in nd.devices},
                                own_resources=self.own_resources, live_pods=live, devshare_pods=ours)
            if held:
                annotations[names.DEVICE_CHECKPOINTS] = json.dumps(held, separators=(",", ":"))
        with self._lock:
            self.inventory = inv
            self.previous = nd
        labels = {k: v for k, v in gpu_labels(inv).items() if v is not None}
        obj = device_object(nd, annotations=annotations, labels=labels)
        usage = self.usage() if self.usage is not None else None
        if usage is not None:
            obj["status"] = {"usage": usage}
        return obj

    def node_pods(self, fresh: bool = False) -> list[dict[str, Any]]:
        """The node's pods: listed now (``fresh``), else as the last round listed them (every round
        lists them while kubelet's checkpoint is read)."""
        if self.client is None:
            return []
        pods = self._pods
        if fresh or pods is None:
            pods = self._pods = self.client.list_node_pods(self.node)
        return pods

    def sync(self, *, resync_s: float = 300.0) -> bool:
        """One round: build, and publish what changed (or everything every ``resync_s``). True: published."""
        obj = self.build()
        status = status_resources(self.inventory, extra=self.status_extra)
        if self.client is None:
            self.published = obj
            return False
        now = time.monotonic()
        changed = False
        if obj != self.published or now - self._last_put > resync_s:
            self.client.put_device(obj)
            self.published = obj
            self._last_put = now
            changed = True
        if status != self.published_status or changed:
            self.client.patch_node_status(self.node, *status)
            self.published_status = status
            changed = True
        if self.label_node:
            labels = gpu_labels(self.inventory)
            if labels != self.published_labels or changed:
                self._publish_labels(labels)
        return changed

    def _publish_labels(self, labels: dict[str, str | None]) -> None:
        """Patch the Node's GPU labels; a refusal (an older deploy/agent without ``patch nodes``) is
        logged and retried next round, and never stops the report."""
        assert self.client is not None
        try:
            self.client.patch_node_labels(self.node, labels)
        except Exception as e:
            self._label_failures += 1
            level = logging.WARNING if self._label_failures == 1 else logging.DEBUG
            log.log(level, "cannot label node %s with its GPU model, driver and vendor (%s); retrying each round. "
                    "deploy/agent's ClusterRole must allow patch on nodes", self.node, e)
            return
        if self._label_failures:
            log.info("node %s labelled with its GPU model, driver and vendor", self.node)
        self._label_failures = 0
        self.published_labels = labels

    def run(self, stop: threading.Event, *, interval: float = 2.0,
            on_change: Callable[[Inventory], None] | None = None) -> None:
        """Sync every ``interval`` seconds until ``stop`` is set; API errors are logged and retried."""
        self.load_previous()
        while not stop.is_set():
            try:
                before = self.inventory
                self.sync()
                if on_change is not None and self.inventory != before:
                    on_change(self.inventory)
            except InvalidInput as e:
                log.error("device report failed: %s", e)
            except Exception:
                log.exception("device report failed; retrying in %.0fs", interval)
            stop.wait(interval)
