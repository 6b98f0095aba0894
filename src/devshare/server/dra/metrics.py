"""The DRA controller's counters as Prometheus metrics (registered on the extender's registry)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from devshare.server.dra.controller import DraController


class DraCollector(Collector):
    def __init__(self, controller: DraController) -> None:
        self.controller = controller

    def collect(self) -> Iterable[Metric]:
        c = self.controller
        for name, value, text in (
            ("claims_allocated", c.allocated, "ResourceClaims devshare allocated"),
            ("gates_lifted", c.gates_lifted, "scheduling gates lifted once a pod's claims were allocated"),
            ("allocations_refused", c.refused, "attempts to allocate a pod's claims that were refused"),
            ("claim_conflicts", c.conflicts, "claim writes that lost to another writer (409)"),
            ("claims_released", c.released, "claims released because their pod was deleted before scheduling"),
            ("claims_overbooked", c.overbooked, "allocated claims not counted: they would over-book a device"),
            ("invalid_objects", c.invalid, "DRA objects that did not parse"),
        ):
            yield CounterMetricFamily(f"devshare_dra_{name}", text, value=value)
        yield GaugeMetricFamily("devshare_dra_synced", "1 once claims, slices and classes are listed",
                                value=1 if c.synced.is_set() else 0)
        yield GaugeMetricFamily("devshare_dra_pods_waiting", "gated pods whose claims wait for devices or claims",
                                value=len(c._waiting))
