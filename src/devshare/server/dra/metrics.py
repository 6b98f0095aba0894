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
            ("claims_allocated", c.allocated, "ResourceClaims of devshare's DeviceClasses that devshare allocated."),
            ("gates_lifted", c.gates_lifted, "Pods whose scheduling gate devshare lifted once their claims were "
                                             "allocated."),
            ("allocations_refused", c.refused, "Attempts to allocate a pod's claims that found no room (retried when "
                                               "devices free up)."),
            ("claim_conflicts", c.conflicts, "Claim allocations another writer changed first (read again and "
                                             "retried)."),
            ("claims_released", c.released, "Claims released because their pod was deleted before it was "
                                            "scheduled."),
            ("claims_overbooked", c.overbooked, "Allocated claims not counted because they would book a device "
                                                "beyond its capacity (each logged)."),
            ("invalid_objects", c.invalid, "ResourceClaims, ResourceSlices or DeviceClasses that could not be read "
                                           "(each logged)."),
        ):
            yield CounterMetricFamily(f"devshare_dra_{name}", text, value=value)
        yield GaugeMetricFamily("devshare_dra_synced", "1 once the ResourceClaims, ResourceSlices and DeviceClasses "
                                "have been read.",
                                value=1 if c.synced.is_set() else 0)
        yield GaugeMetricFamily("devshare_dra_pods_waiting", "Pods held by devshare's scheduling gate whose claims "
                                "wait for devices.",
                                value=len(c._waiting))
