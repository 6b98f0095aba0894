"""The agent's /metrics: per-container GPU usage beside the share, with the labels the dashboards use."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from devshare.agent.metrics import UsageCollector, serve
from devshare.agent.usage import UNKNOWN, ContainerUsage, UsageMonitor

GIB = 2**30


class Reader:
    def __init__(self, rows: list[ContainerUsage]) -> None:
        self.rows = rows
        self.unreadable = 1

    def read(self) -> list[ContainerUsage]:
        return self.rows

    def inventory(self) -> Any:
        from devshare.agent.inventory import Inventory

        return Inventory()


ROWS = [
    ContainerUsage(namespace="team", pod="train-0", container="main", uuid="GPU-a", minor=0, memory_used=9 * GIB,
                   utilization=0.42, processes=2, memory_allocated=8 * GIB, core_allocated=0.5),
    ContainerUsage(namespace="team", pod="idle-0", container="main", uuid="GPU-a", minor=0, memory_used=0,
                   utilization=0.0, memory_allocated=4 * GIB, core_allocated=0.25),
    ContainerUsage(namespace=UNKNOWN, pod=UNKNOWN, container=UNKNOWN, uuid="GPU-b", minor=1, memory_used=GIB,
                   utilization=None, processes=1),
]


def registry() -> CollectorRegistry:
    monitor = UsageMonitor(Reader(ROWS), node="gpu-1")  # type: ignore[arg-type]
    monitor.round()
    reg = CollectorRegistry()
    reg.register(UsageCollector(monitor, "gpu-1"))
    return reg


def test_series_and_labels() -> None:
    reg = registry()

    def value(name: str, **labels: str) -> float | None:
        return reg.get_sample_value(name, {"node": "gpu-1", "uuid": "GPU-a", "minor": "0", "namespace": "team",
                                           "container": "main", **labels})

    assert value("devshare_container_gpu_memory_used_bytes", pod="train-0") == 9 * GIB
    assert value("devshare_container_gpu_utilization_ratio", pod="train-0") == 0.42
    assert value("devshare_container_gpu_memory_allocated_bytes", pod="train-0") == 8 * GIB
    assert value("devshare_container_gpu_core_allocated_ratio", pod="train-0") == 0.5
    assert value("devshare_container_gpu_memory_over_share_total", pod="train-0") == 1
    assert value("devshare_container_gpu_memory_used_bytes", pod="idle-0") == 0
    assert value("devshare_container_gpu_memory_over_share_total", pod="idle-0") == 0
    unknown = {"uuid": "GPU-b", "minor": "1", "namespace": UNKNOWN, "pod": UNKNOWN, "container": UNKNOWN}
    assert value("devshare_container_gpu_memory_used_bytes", **unknown) == GIB
    assert value("devshare_container_gpu_utilization_ratio", **unknown) is None  # no samples: no series
    assert value("devshare_container_gpu_memory_over_share_total", **unknown) is None
    assert reg.get_sample_value("devshare_agent_gpu_processes_unreadable") == 1
    text = generate_latest(reg).decode()
    assert "# TYPE devshare_container_gpu_memory_over_share_total counter" in text


def test_served_over_http(tmp_path: Path) -> None:
    monitor = UsageMonitor(Reader(ROWS), node="gpu-1")  # type: ignore[arg-type]
    monitor.round()
    server = serve(monitor, "gpu-1", port=0, address="127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as r:
            text = r.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert "devshare_container_gpu_memory_used_bytes" in text
    assert '\ndevshare_build_info{python="' in text  # issue 40: which devshare runs on the node
    assert "_created" not in text
