"""The whole agent: reporter loop plus the device plugins, wired together."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from devshare.agent.client import AgentClient
from devshare.agent.deviceplugin.allocator import Allocator
from devshare.agent.deviceplugin.server import DEFAULT_DIR, NO_DEVICE, DevicePlugins, servable
from devshare.agent.inventory import Backend
from devshare.agent.reporter import Reporter
from devshare.agent.resources import PLUGIN_RESOURCES, PluginResource

log = logging.getLogger("devshare.agent")


class Agent:
    """Reporter and device plugins of one node. ``start`` then ``run_until(stop)``, or ``close``."""

    def __init__(
        self,
        backend: Backend,
        node: str,
        client: AgentClient,
        *,
        resources: Sequence[PluginResource] = PLUGIN_RESOURCES,
        plugin_dir: Path = DEFAULT_DIR,
        kubelet_socket: Path | None = None,
        override: list[list[float]] | None = None,
        checkpoint: Path | None = None,
        watch_interval: float = 1.0,
        label_node: bool = True,
        journal: Path | None = None,
        tick_interval: float = 1.0,
    ) -> None:
        self.backend = backend
        self.node = node
        self.client = client
        self.reporter = Reporter(backend, node, client=client, override=override, checkpoint=checkpoint,
                                 own_resources=[r.name for r in resources], label_node=label_node)
        self.reporter.load_previous()
        self.reporter.build()
        inv = self.reporter.inventory
        serve: list[PluginResource] = []
        fallback: list[str] = []
        for r in resources:
            why = servable(r, inv)
            if why is None:
                serve.append(r)
            elif why != NO_DEVICE:
                log.info("not serving %s as a device plugin: %s", r.name, why)
                fallback.append(r.name)
                log.warning("%s is advertised through the node status instead: pods asking only for it get "
                            "no Allocate call (no NVIDIA_VISIBLE_DEVICES from devshare)", r.name)
        self.served = serve
        self.reporter.status_extra = tuple(fallback)
        self.allocator = Allocator(node, client, lambda: self.reporter.inventory,
                                   resources=[r.name for r in serve], checkpoint=checkpoint, journal=journal)
        self.tick_interval = tick_interval
        self._ticking = threading.Event()
        self._ticker: threading.Thread | None = None
        self.plugins = DevicePlugins(serve, self.allocator, lambda: self.reporter.inventory, plugin_dir=plugin_dir,
                                     kubelet_socket=kubelet_socket, watch_interval=watch_interval,
                                     on_kubelet_restart=self.allocator.kubelet_restarted)

    def start(self) -> None:
        self.reporter.sync()
        self.plugins.start()
        self._ticker = threading.Thread(target=self._tick, name="devshare-trades", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        """Resolve stand-in handouts and apply owed pod writes between Allocate calls."""
        while not self._ticking.wait(self.tick_interval):
            try:
                self.allocator.tick()
            except Exception:
                log.exception("resolving handed-out devices failed; retrying")

    def run_until(self, stop: threading.Event, *, interval: float = 2.0) -> None:
        try:
            self.reporter.run(stop, interval=interval, on_change=lambda _inv: self.plugins.notify())
        finally:
            self.close()

    def close(self) -> None:
        self._ticking.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        self.plugins.stop()
        self.backend.close()
