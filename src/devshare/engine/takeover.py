"""Taking over a running cluster from another scheduler: what the watch shows of it (issue 36).

- :class:`Inventories`: a node's devices from every source that reports them (devshare's Device,
  Koordinator's Device, HAMi's and Volcano's node registers, gpushare capacity:
  :mod:`devshare.model.inventory`), the first one it has published into the state.
- :class:`PeerPods`: pods another scheduler placed, counted on the cards their annotations name
  (:mod:`devshare.model.peers`), and read again whenever their node's inventory changes (the cards
  they name are matched against it).

Both are fed by :class:`devshare.engine.watched.WatchedCluster` at a few marked call sites, and own
nothing else: the counting is the one cache's (:meth:`devshare.engine.lifecycle.Lifecycle.add_placed`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.state import ClusterState
from devshare.model import inventory, peers
from devshare.model.device import NodeDevices
from devshare.model.errors import InvalidInput
from devshare.model.kubeobjects import meta, object_key
from devshare.model.pod import parse_pod
from devshare.model.request import PodRequest

log = logging.getLogger(__name__)


class Inventories:
    """Per node, what each source says; the state gets the first source's (:func:`inventory.choose`)."""

    def __init__(self, state: ClusterState, on_change: Callable[[str], None]) -> None:
        self.state = state
        self.on_change = on_change  # called with a node's name after its published inventory changed
        self.sources: dict[str, dict[str, NodeDevices | None]] = {}
        self.chosen: dict[str, str] = {}  # node -> the source published
        self.problems = state.unreadable  # (node, source) -> why it could not be read

    def set(self, node: str, source: str, devices: NodeDevices | None) -> None:
        found = self.sources.setdefault(node, {})
        if found.get(source) == devices and source in found:
            return
        found[source] = devices
        self._publish(node)

    def node(self, obj: dict[str, Any]) -> None:
        """The node-borne sources of a Node object (HAMi's and Volcano's registers, gpushare capacity)."""
        name = str(meta(obj).get("name", ""))
        for source, devices, problem in inventory.node_sources(obj):
            if problem is not None and self.problems.get((name, source)) != problem:
                log.warning("node %s: %s (not used)", name, problem)
            self.unreadable(name, source, problem)
            self.set(name, source, devices)

    def unreadable(self, node: str, source: str, problem: str | None) -> None:
        """Why ``source``'s inventory of ``node`` could not be read; None: it was read, or is gone."""
        if problem is None:
            self.problems.pop((node, source), None)
        else:
            self.problems[(node, source)] = problem

    def node_gone(self, name: str) -> None:
        for source in ("hami", "volcano-vgpu", "capacity"):
            self.unreadable(name, source, None)
            self.set(name, source, None)

    def _publish(self, node: str) -> None:
        best = inventory.choose(self.sources.get(node, {}))
        if best is None:
            had = self.chosen.pop(node, None)
            if had is not None or node in self.state.devices:
                self.state.remove_devices(node)
                self.on_change(node)
            return
        source, nd = best
        if self.chosen.get(node) == source and self.state.devices.get(node) == nd:
            return
        if self.chosen.get(node) != source:
            log.info("node %s: devices from %s", node, "its devshare Device" if source == "devshare" else source)
        self.chosen[node] = source
        self.state.set_devices(nd)
        self.on_change(node)


class PeerPods:
    """Bound pods another scheduler placed: counted from its annotations, on the node's inventory."""

    def __init__(self, lifecycle: Lifecycle) -> None:
        self.lifecycle = lifecycle
        self.state: ClusterState = lifecycle.state
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}  # node -> key -> the pod as last seen
        self.node_of: dict[str, str] = {}
        self.reported: dict[str, tuple[str, ...]] = {}  # key -> the problems last logged
        self.flagged: set[str] = set()  # peer pods some card of which is counted conservatively

    @property
    def counted(self) -> int:
        """Peer pods followed (a gauge)."""
        return len(self.node_of)

    @property
    def conservative(self) -> int:
        """Of which some card is counted conservatively (a gauge)."""
        return len(self.flagged)

    def apply(self, obj: dict[str, Any], node: str) -> bool:
        """A bound pod without devshare's allocation: counted when a peer placed it (True), else False."""
        key = object_key(obj)
        found = peers.readings(obj)
        if not found:
            self.forget(key)
            return False
        self._remember(key, node, obj)
        self._count(key, obj, node, found)
        return True

    def forget(self, key: str) -> None:
        node = self.node_of.pop(key, None)
        if node is not None:
            self.objects.get(node, {}).pop(key, None)
            rec = self.state.pods.get(key)
            if rec is not None and rec.peer is not None:
                self.lifecycle.release(key)
        self.reported.pop(key, None)
        self.flagged.discard(key)

    def node_changed(self, node: str) -> None:
        """The node's inventory changed: every peer pod there is matched again."""
        for key, obj in list(self.objects.get(node, {}).items()):
            self._count(key, obj, node, peers.readings(obj))

    def _remember(self, key: str, node: str, obj: dict[str, Any]) -> None:
        old = self.node_of.get(key)
        if old is not None and old != node:
            self.objects.get(old, {}).pop(key, None)
        self.node_of[key] = node
        self.objects.setdefault(node, {})[key] = obj

    def _count(self, key: str, obj: dict[str, Any], node: str, found: list[Any]) -> None:
        reading = peers.resolve(found, node, self.state.devices.get(node), str(meta(obj).get("uid") or ""))
        if reading is None:
            return
        pod = self._request(obj)
        self.lifecycle.add_placed(pod, reading.allocation, peer=reading.dialect, problems=reading.problems)
        problems = self.state.pods[key].problems
        if problems and self.reported.get(key) != problems:
            log.warning("pod %s, placed by %s on %s, is counted conservatively: %s", key, reading.dialect, node,
                        "; ".join(problems))
        self.reported[key] = problems
        if problems:
            self.flagged.add(key)
        else:
            self.flagged.discard(key)

    @staticmethod
    def _request(obj: dict[str, Any]) -> PodRequest:
        m = meta(obj)
        try:
            return parse_pod(obj)
        except InvalidInput:
            # a peer's pod need not read in devshare's rules (another scheduler admitted it): who it is is enough
            return PodRequest(namespace=str(m.get("namespace", "")), name=str(m.get("name", "")),
                              uid=str(m.get("uid") or ""))
