"""DRA on the node: the kubelet plugin and the node's ResourceSlice, published from the same inventory
as the Device object (the reporter's), with what only the node knows (NUMA node, driver version).

:class:`NodeApi` is the narrow interface to the API server this needs (read a claim, read and write
the node's slice); the agent's client implements it (:class:`devshare.agent.kubeclient.KubeAgentClient`,
over the one API client).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from devshare.agent.dra.cdi import CDI_DIR, CdiSpecs
from devshare.agent.dra.plugin import PLUGIN_DIR, REGISTRY_DIR, KubeletPlugin
from devshare.agent.inventory import Inventory
from devshare.model import draslices, names
from devshare.model.device import NodeDevices

log = logging.getLogger("devshare.agent.dra")
RESYNC = 300.0  # seconds after which the slice is read and compared again even if nothing changed here


class NodeApi(Protocol):
    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def get_slice(self, name: str) -> dict[str, Any] | None: ...

    def create_slice(self, obj: dict[str, Any]) -> dict[str, Any]: ...

    def replace_slice(self, obj: dict[str, Any]) -> dict[str, Any]: ...


def extras_of(inv: Inventory) -> dict[tuple[str, int], draslices.DeviceExtras]:
    """What the slice says of each GPU beyond the Device object: its NUMA node and the driver version."""
    return {(names.GPU, g.minor): draslices.DeviceExtras(numa_node=g.numa_node if g.numa_node >= 0 else None,
                                                   driver_version=inv.driver_version)
            for g in inv.gpus}


def publish_slice(api: NodeApi, nd: NodeDevices, inv: Inventory) -> dict[str, Any] | None:
    """Create or replace the node's ResourceSlice when it differs from ``nd``; the slice written, or None
    when nothing changed."""
    desired = draslices.slice_object(nd, extras=extras_of(inv), published_by="agent")
    current = api.get_slice(desired["metadata"]["name"])
    if current is None:
        return api.create_slice(desired)
    if not draslices.slice_changed(current, desired):
        return None
    return api.replace_slice(draslices.next_slice(current, desired))


class DraNode:
    """Serve the kubelet plugin and keep the node's slice current (:meth:`refresh` after each report)."""

    def __init__(self, node: str, api: NodeApi, inventory: Callable[[], Inventory],
                 devices: Callable[[], NodeDevices | None], *, cdi_dir: Path = CDI_DIR,
                 plugin_dir: Path = PLUGIN_DIR, registry_dir: Path = REGISTRY_DIR) -> None:
        self.api = api
        self.inventory = inventory
        self.devices = devices
        self.plugin = KubeletPlugin(node, api.get_claim, inventory, cdi=CdiSpecs(cdi_dir), plugin_dir=plugin_dir,
                                    registry_dir=registry_dir)
        self._lock = threading.Lock()
        self._published: tuple[NodeDevices, Inventory] | None = None
        self._at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, *, interval: float = 2.0) -> None:
        self.plugin.start()
        self.refresh()
        self._thread = threading.Thread(target=self._run, args=(interval,), name="devshare-dra-slice", daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.refresh()

    def refresh(self, *, now: float | None = None, resync: float = RESYNC) -> None:
        """Publish the slice when the inventory changed since the last write (or ``resync`` seconds
        passed): no request at all otherwise."""
        nd, inv = self.devices(), self.inventory()
        if nd is None:
            return
        t = time.monotonic() if now is None else now
        with self._lock:
            if self._published == (nd, inv) and t - self._at < resync:
                return
            try:
                if publish_slice(self.api, nd, inv) is not None:
                    log.info("published ResourceSlice %s", draslices.slice_name(nd.node))
                self._published, self._at = (nd, inv), t
            except Exception as e:  # the API server away: the next round tries again
                log.warning("publishing ResourceSlice %s failed: %s", draslices.slice_name(nd.node), e)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.plugin.stop()
