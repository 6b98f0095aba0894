"""The whole agent: reporter loop plus the device plugins, wired together."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devshare.agent.client import AgentClient
from devshare.agent.deviceplugin.allocator import Allocator
from devshare.agent.deviceplugin.server import DEFAULT_DIR, NO_DEVICE, DevicePlugins, servable
from devshare.agent.inventory import Backend
from devshare.agent.metrics import serve
from devshare.agent.reporter import Reporter
from devshare.agent.resources import PLUGIN_RESOURCES, PluginResource
from devshare.agent.usage import ContainerUsage, UsageMonitor, UsageReader, over_share_event

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
        usage_interval: float = 10.0,
        usage_publish_interval: float = 60.0,
        proc_root: Path = Path("/proc"),
        metrics_port: int = 0,
        metrics_address: str = "0.0.0.0",
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
        self.usage: UsageMonitor | None = None
        if usage_interval > 0:
            reader = UsageReader(backend, node, self.reporter.node_pods, lambda: self.reporter.inventory,
                                 proc=proc_root)
            self.usage = UsageMonitor(reader, node=node, event=self._over_share_event, interval=usage_interval,
                                      publish_interval=usage_publish_interval)
            usage = self.usage
            self.reporter.usage = lambda: usage.status
        self.metrics_port = metrics_port
        self.metrics_address = metrics_address
        self._metrics: Any = None
        self._stopping = threading.Event()
        self._usage_thread: threading.Thread | None = None
        self.plugins = DevicePlugins(serve, self.allocator, lambda: self.reporter.inventory, plugin_dir=plugin_dir,
                                     kubelet_socket=kubelet_socket, watch_interval=watch_interval,
                                     on_kubelet_restart=self.allocator.kubelet_restarted)

    def start(self) -> None:
        self.reporter.sync()
        self.plugins.start()
        self._ticker = threading.Thread(target=self._tick, name="devshare-trades", daemon=True)
        self._ticker.start()
        if self.usage is not None:
            self._usage_thread = threading.Thread(target=self.usage.run, args=(self._stopping,), name="devshare-usage",
                                                  daemon=True)
            self._usage_thread.start()
            if self.metrics_port:
                self._metrics = serve(self.usage, self.node, port=self.metrics_port, address=self.metrics_address)

    def _over_share_event(self, row: ContainerUsage, message: str) -> None:
        self.client.record_event(row.namespace, over_share_event(row, message, node=self.node, at=time.time()))

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
        self._stopping.set()
        if self._ticker is not None:
            self._ticker.join(timeout=5)
        if self._usage_thread is not None:
            self._usage_thread.join(timeout=5)
        if self._metrics is not None:
            self._metrics.shutdown()
            self._metrics.server_close()
        self.plugins.stop()
        self.backend.close()
