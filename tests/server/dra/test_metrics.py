"""The DRA controller's counters as Prometheus metrics (server/dra/metrics.py), read at scrape time.
Their HELP texts and docs/metrics.md: tests/server/extender/test_collectors.py."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.server.dra.controller import DraController
from devshare.server.dra.metrics import DraCollector

COUNTERS = {"allocated": "claims_allocated", "gates_lifted": "gates_lifted", "refused": "allocations_refused",
            "conflicts": "claim_conflicts", "released": "claims_released", "overbooked": "claims_overbooked",
            "invalid": "invalid_objects"}


def scrape(registry: CollectorRegistry) -> dict[str, float]:
    text = generate_latest(registry).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_controllers_counters_and_gauges_at_scrape_time() -> None:
    controller = DraController(object(), Lifecycle(Scheduler(ClusterState())))  # type: ignore[arg-type]
    registry = CollectorRegistry()
    registry.register(DraCollector(controller))
    got = scrape(registry)
    assert all(got[f"devshare_dra_{name}_total"] == 0 for name in COUNTERS.values())
    assert got["devshare_dra_synced"] == 0 and got["devshare_dra_pods_waiting"] == 0
    for i, attribute in enumerate(COUNTERS, start=1):
        setattr(controller, attribute, i)
    controller.synced.set()
    controller._waiting.update({"default/a", "default/b"})
    got = scrape(registry)
    for i, name in enumerate(COUNTERS.values(), start=1):
        assert got[f"devshare_dra_{name}_total"] == i, name
    assert got["devshare_dra_synced"] == 1 and got["devshare_dra_pods_waiting"] == 2
