"""The extender's own Prometheus collectors: what its parts count, read at scrape time."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from devshare.engine.watched import WatchedCluster
from devshare.kube.persist import SnapshotWriter
from devshare.server.eventloop import StallWatch
from devshare.server.extender.claims import Claims
from devshare.server.extender.lane import Lanes
from devshare.server.extender.requeue import FREED_AT, Requeue


class SaveCollector(Collector):
    def __init__(self, saver: SnapshotWriter) -> None:
        self.saver = saver

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("devshare_extender_saves", "Writes of the --save file (the cluster file written "
                                  "back).", value=self.saver.writes)
        yield CounterMetricFamily("devshare_extender_save_failures",
                                  "Failed writes of the --save file (the previous file is kept).",
                                  value=self.saver.failures)


class LaneCollector(Collector):
    """What the verbs' lane served itself, and the connections it handed to aiohttp (lane.py)."""

    def __init__(self, lanes: Lanes) -> None:
        self.lanes = lanes

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("devshare_extender_lane_requests", "Requests of kube-scheduler (filter, prioritize, "
                                  "bind, preempt) answered by the fast path of the plain-HTTP port (--lane).",
                                  value=self.lanes.served)
        yield CounterMetricFamily("devshare_extender_lane_handovers",
                                  "Connections the fast path passed to the full HTTP server, at a request other "
                                  "than kube-scheduler's (another path, a browser, a probe).", value=self.lanes.handed)
        yield CounterMetricFamily("devshare_extender_lane_connections",
                                  "Connections accepted on the plain-HTTP port (kube-scheduler keeps two idle: each "
                                  "request beyond them opens one).", value=self.lanes.connections)


class RequeueCollector(Collector):
    """Pods nudged after devices were freed (server/extender/requeue.py)."""

    def __init__(self, requeue: Requeue) -> None:
        self.requeue = requeue

    def collect(self) -> Iterator[Metric]:
        requeue = self.requeue
        yield CounterMetricFamily(
            "devshare_extender_requeue_nudges",
            f"Pods refused for lack of free devices that were annotated {FREED_AT} when devices were freed, so "
            "that kube-scheduler tries them again at once.", value=requeue.nudged)
        yield CounterMetricFamily("devshare_extender_requeue_failures",
                                  "Such annotations that could not be written (each logged).", value=requeue.failures)


class StallCollector(Collector):
    """The moments the event loop ran nothing for a second or more (devshare.server.eventloop)."""

    def __init__(self, stalls: StallWatch) -> None:
        self.stalls = stalls

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily("devshare_extender_loop_stalls", "Times the extender answered nothing for a second "
                                  "or more (each logged with what held it): every request waited meanwhile.",
                                  value=self.stalls.stalls)
        yield CounterMetricFamily("devshare_extender_loop_stalled_seconds", "Seconds of those stalls.",
                                  value=self.stalls.stalled_seconds)


class SyncCollector(Collector):
    """The watched cluster's counters of allocations found on pods and not counted, and of the peers'
    inventories it could not read."""

    def __init__(self, cluster: WatchedCluster) -> None:
        self.sync = cluster

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "devshare_extender_overbooked_allocations",
            "Allocations found on bound pods that would have booked a card beyond its compute or memory: "
            "refused and not counted (a DeviceOverbooked Event on the pod).", value=self.sync.overbooked)
        yield CounterMetricFamily(
            "devshare_extender_malformed_allocations",
            "Bound pods whose allocation annotation could not be used (unreadable, or naming another node).",
            value=self.sync.malformed)
        trades = self.sync.trades
        yield CounterMetricFamily(
            "devshare_extender_trades", "Trades of the node agents (identical pods exchanging allocations) "
            "applied as exact exchanges.", value=trades.exchanged)
        yield CounterMetricFamily(
            "devshare_extender_trade_writes_alone", "Trade writes applied alone, through the over-booking check "
            "(their partner's write late, gone, or not an exact exchange).", value=trades.unpaired)
        yield GaugeMetricFamily(
            "devshare_extender_trade_writes_parked", "Trade writes waiting for their partner's.",
            value=len(trades.parked))
        unread = GaugeMetricFamily(
            "devshare_inventories_unreadable", "Nodes whose device inventory from a source (devshare's or "
            "Koordinator's Device, HAMi's or Volcano's node register, gpushare's capacity) could not be read and is "
            "not used, by source (each logged; listed under unreadableInventories by /inspect).", labels=["source"])
        for source, n in sorted(Tally(source for _, source in self.sync.inventories.problems).items()):
            unread.add_metric([source], n)
        yield unread


class ClaimsCollector(Collector):
    """The claim ledger's writes, conflicts and refusals."""

    def __init__(self, claims: Claims) -> None:
        self.claims = claims

    def collect(self) -> Iterator[Metric]:
        c = self.claims.counters
        for name, value, doc in (
            ("writes", c.writes, "Writes of the claim ledger (the ConfigMap devshare-claims: which replica binds "
                                 "which pod to which cards) that went through."),
            ("conflicts", c.conflicts, "Ledger writes refused because another replica wrote first (read again and "
                                       "retried)."),
            ("refused", c.refused, "Binds refused: the pod did not fit beside the claims in the ledger."),
            ("withdrawn", c.withdrawn, "Claims removed after their Binding failed."),
            ("pruned", c.pruned, "Claims of pods bound, gone, finished or never bound, removed."),
            ("absorbed", c.absorbed, "Claims of other replicas counted by this one before it saw their pods bound."),
            ("waits", c.waited, "Ledger writes that first waited for this replica to see every pod the ledger's "
                                "last writer had seen."),
        ):
            yield CounterMetricFamily(f"devshare_extender_claim_{name}", doc, value=value)
