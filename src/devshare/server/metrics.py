"""Prometheus helpers shared by the HTTP services: latency buckets sized for in-process answers,
a registry with the build information in it (and no ``_created`` series: :mod:`devshare.buildinfo`),
and the ``GET /metrics`` response of an exposition."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from devshare.buildinfo import BuildInfoCollector

# seconds: answers take tens of microseconds to tens of milliseconds; binds wait on the API server
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


def new_registry() -> CollectorRegistry:
    """A registry of its own for one server, with ``devshare_build_info`` in it."""
    registry = CollectorRegistry()
    registry.register(BuildInfoCollector())
    return registry


def metrics_response(exposition: bytes) -> web.Response:
    """A text exposition (``generate_latest``'s) as an aiohttp response."""
    return web.Response(body=exposition, headers={"Content-Type": CONTENT_TYPE_LATEST})


def sample(registry: CollectorRegistry, name: str, labels: dict[str, str] | None = None) -> float:
    """The current value of one sample (0 when absent): for tests and benchmarks."""
    return registry.get_sample_value(name, labels or {}) or 0.0
