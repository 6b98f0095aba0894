"""The agent's Prometheus metrics (``GET /metrics`` on ``--metrics-port``): per-container GPU usage
beside the allocated share (:mod:`devshare.agent.usage`).

Labels of the per-container series: ``namespace``, ``pod``, ``container``, ``node``, ``uuid`` (the
GPU's), ``minor`` (the GPU's, as in the extender's ``devshare_device_*`` series, for joins).
Processes no pod can be found for are under ``namespace``/``pod``/``container`` = ``unknown``; a
known pod's process whose container is not known yet, under its pod with ``container="unknown"``.

- ``devshare_container_gpu_memory_used_bytes``: GPU memory held by the container's processes;
- ``devshare_container_gpu_utilization_ratio``: share of the GPU's SMs its processes kept busy
  (0..1, the mean of the driver's process samples over the last interval; absent where the GPU gives
  no samples);
- ``devshare_container_gpu_memory_allocated_bytes``, ``devshare_container_gpu_core_allocated_ratio``:
  its share of that GPU (0 for a process on a GPU its allocation does not give it);
- ``devshare_container_gpu_memory_over_share_total``: times it went over its memory share;
- ``devshare_agent_usage_read_seconds``: the last round's duration;
  ``devshare_agent_gpu_processes_unreadable``: processes of the last round whose cgroup could not be read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from devshare.agent.usage import UsageMonitor
from devshare.buildinfo import BuildInfoCollector  # also: no _created series

log = logging.getLogger("devshare.agent.metrics")

LABELS = ["namespace", "pod", "container", "node", "uuid", "minor"]
USED = "devshare_container_gpu_memory_used_bytes"
UTILIZATION = "devshare_container_gpu_utilization_ratio"
MEMORY_ALLOCATED = "devshare_container_gpu_memory_allocated_bytes"
CORE_ALLOCATED = "devshare_container_gpu_core_allocated_ratio"
OVER_SHARE = "devshare_container_gpu_memory_over_share"  # a counter: exposed with _total


class UsageCollector(Collector):
    """The series of the monitor's last round (a container gone is a series gone)."""

    def __init__(self, monitor: UsageMonitor, node: str) -> None:
        self.monitor = monitor
        self.node = node

    def collect(self) -> Iterator[Any]:
        rows, counts, seconds, unreadable = self.monitor.snapshot()
        used = GaugeMetricFamily(USED, "GPU memory held by the container's processes, in bytes.", labels=LABELS)
        util = GaugeMetricFamily(UTILIZATION, "Share of the GPU's SMs the container's processes kept busy (0..1).",
                                 labels=LABELS)
        mem = GaugeMetricFamily(MEMORY_ALLOCATED, "GPU memory the container's allocation gives it, in bytes.",
                                labels=LABELS)
        core = GaugeMetricFamily(CORE_ALLOCATED, "Share of the GPU's compute the container's allocation gives it "
                                 "(0..1).", labels=LABELS)
        over = CounterMetricFamily(OVER_SHARE, "Times the container's processes held more of the GPU's memory than "
                                   "its share.", labels=LABELS)
        for r in rows:
            labels = [r.namespace, r.pod, r.container, self.node, r.uuid, str(r.minor)]
            used.add_metric(labels, r.memory_used)
            if r.utilization is not None:
                util.add_metric(labels, r.utilization)
            mem.add_metric(labels, r.memory_allocated)
            core.add_metric(labels, r.core_allocated)
            if r.attributed:
                over.add_metric(labels, counts.get(r.key, 0))
        yield from (used, util, mem, core, over)
        yield GaugeMetricFamily("devshare_agent_usage_read_seconds", "Duration of the last GPU usage round.",
                                value=seconds)
        yield GaugeMetricFamily("devshare_agent_gpu_processes_unreadable", "GPU processes of the last round whose "
                                "cgroup could not be read (counted under unknown).", value=unreadable)


def serve(monitor: UsageMonitor, node: str, *, port: int, address: str = "0.0.0.0") -> Any:
    """Serve ``/metrics`` on ``address:port`` (prometheus_client's HTTP server, in a thread); returns
    the server (``shutdown()`` stops it)."""
    registry = CollectorRegistry()
    registry.register(UsageCollector(monitor, node))
    registry.register(BuildInfoCollector())
    server, _thread = start_http_server(port, addr=address, registry=registry)
    log.info("serving the agent's metrics on %s:%d/metrics", address, port)
    return server
