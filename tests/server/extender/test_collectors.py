"""The extender's own Prometheus collectors (server/extender/collectors.py): what its parts count,
read at scrape time, under the names the dashboards use."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.engine.watched import WatchedCluster
from devshare.server.eventloop import StallWatch
from devshare.server.extender.collectors import RequeueCollector, StallCollector, SyncCollector
from devshare.server.extender.requeue import Requeue
from support.extender import Switch, cluster


def scrape(*collectors: object) -> dict[str, float]:
    registry = CollectorRegistry()
    for c in collectors:
        registry.register(c)  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


class NoPending:
    def pending_pod(self, key: str) -> None:
        return None


def test_the_counters_are_read_at_scrape_time() -> None:
    watched = WatchedCluster(Lifecycle(Scheduler(ClusterState())), clock=time.monotonic)
    requeue = Requeue(cluster(), NoPending(), Switch())  # type: ignore[arg-type]
    stalls = StallWatch("x")
    collectors = (SyncCollector(watched), RequeueCollector(requeue), StallCollector(stalls))
    assert scrape(*collectors)["devshare_extender_overbooked_allocations_total"] == 0
    watched.overbooked, watched.malformed, requeue.nudged, stalls.stalls = 2, 3, 4, 5
    got = scrape(*collectors)
    assert got["devshare_extender_overbooked_allocations_total"] == 2
    assert got["devshare_extender_malformed_allocations_total"] == 3
    assert got["devshare_extender_requeue_nudges_total"] == 4
    assert got["devshare_extender_loop_stalls_total"] == 5
    assert got["devshare_extender_trade_writes_parked"] == 0
