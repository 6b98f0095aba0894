"""The extender's Prometheus metrics, in a registry of their own (one per server).

- ``devshare_extender_requests_total{verb, result}``: every answer; result is ``ok``, ``error``
  (an answer carrying an Error), ``malformed`` (400) or ``not_ready``;
- ``devshare_extender_request_seconds{verb}``: latency from body read to answer built;
- ``devshare_extender_failures_total{verb, reason}``: per-node filter failures and bind errors by
  reason class (:func:`reason_class`); with a shortlist (``scheduling.shortlist``) a filter that
  passes a node counts only its unknown nodes: the reasons of the others are not worked out;
- ``devshare_device_allocated_ratio{node, type, minor, resource}``: share of each device's compute
  (``core``) and memory (``memory``) that is allocated, read from the state at scrape time;
- ``devshare_device_containers{node, type, minor}``: containers holding a share of each device;
- ``devshare_node_stranded_gpus{node}`` and ``devshare_stranded_gpus``: GPU compute no further share
  can use, in GPUs (:mod:`devshare.server.extender.occupancy` defines stranded);
- ``devshare_extender_pods{phase}``, ``devshare_extender_synced``, ``devshare_extender_leader``.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from devshare.engine.state import ClusterState
from devshare.model.names import GPU
from devshare.server.extender.occupancy import stranded_core
from devshare.server.metrics import LATENCY_BUCKETS

OK = "ok"
ERROR = "error"
MALFORMED = "malformed"
NOT_READY = "not_ready"

# (substring of the reason, class): first match wins
_CLASSES: tuple[tuple[str, str], ...] = (
    ("not ready", "not-ready"),
    ("not the leader", "not-leader"),
    ("another devshare replica", "claimed-by-replica"),
    ("claim ledger", "claim-ledger"),
    ("planned on node", "group-planned-elsewhere"),
    ("no member binds until", "gang-waiting"),
    ("the gang needs", "gang-no-room"),
    ("not known to devshare", "unknown-node"),
    ("is not known", "unknown-node"),
    ("unschedulable", "cordoned"),
    ("compute free", "compute"),
    ("in use, a whole device", "device-in-use"),
    ("too small", "device-size"),
    (" free, ", "device-memory"),
    ("containers already, at most", "container-limit"),
    ("unhealthy", "unhealthy"),
    ("held by another", "held-outside"),
    ("node has no", "no-devices"),
    ("device(s), a container asks", "device-count"),
    ("not enough CPU", "node-cpu"),
    ("not enough memory", "node-memory"),
    ("model", "gpu-model"),
    ("policy", "compute-policy"),
    ("invalid request", "invalid-request"),
    ("not found", "pod-not-found"),
    ("already", "conflict"),
    ("API server", "backend"),
)


def reason_class(reason: str) -> str:
    """A short, bounded label for a reason (reasons themselves name nodes and sizes). Reasons up to
    256 characters are classified once (a bounded cache); longer ones, which may quote a pod's
    values, each time."""
    return _cached_class(reason) if len(reason) <= 256 else _classify(reason)


@lru_cache(maxsize=8192)
def _cached_class(reason: str) -> str:
    return _classify(reason)


def _classify(reason: str) -> str:
    for needle, cls in _CLASSES:
        if needle in reason:
            return cls
    return "other"


class _StateCollector(Collector):
    def __init__(self, state: Callable[[], ClusterState], synced: Callable[[], bool],
                 leader: Callable[[], bool]) -> None:
        self._state = state
        self._synced = synced
        self._leader = leader

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self._state()
        ratio = GaugeMetricFamily(
            "devshare_device_allocated_ratio",
            "Allocated share of each device (0..1), by resource: core (compute) or memory.",
            labels=["node", "type", "minor", "resource"],
        )
        containers = GaugeMetricFamily(
            "devshare_device_containers", "Containers holding a share of each device (pods per card).",
            labels=["node", "type", "minor"],
        )
        node_stranded = GaugeMetricFamily(
            "devshare_node_stranded_gpus",
            "GPU compute no further share can use, per node, in GPUs (occupancy.py defines stranded).",
            labels=["node"],
        )
        limit = state.max_containers
        stranded_total = 0.0
        for node in state.inspect()["nodes"]:
            name = node["name"]
            stranded = 0.0
            for d in node["devices"]:
                dtype, minor, total, used = d["type"], str(d["minor"]), d["total"], d["used"]
                if total["core"]:
                    ratio.add_metric([name, dtype, minor, "core"], float(used["core"]) / float(total["core"]))
                if total.get("memory"):
                    ratio.add_metric([name, dtype, minor, "memory"], int(used["memory"]) / int(total["memory"]))
                containers.add_metric([name, dtype, minor], int(used.get("containers", 0)))
                if dtype == GPU:
                    stranded += stranded_core(d, limit) / 100
            node_stranded.add_metric([name], stranded)
            stranded_total += stranded
        yield ratio
        yield containers
        yield node_stranded
        yield GaugeMetricFamily("devshare_stranded_gpus",
                                "GPU compute no further share can use, cluster-wide, in GPUs.", value=stranded_total)
        pods = GaugeMetricFamily("devshare_extender_pods", "Pods holding devices, by phase (assumed, bound).",
                                 labels=["phase"])
        counts = {"assumed": 0, "bound": 0}
        for rec in state.pods.values():
            counts[rec.phase] = counts.get(rec.phase, 0) + 1
        for phase, n in sorted(counts.items()):
            pods.add_metric([phase], n)
        yield pods
        yield GaugeMetricFamily("devshare_extender_synced", "1 once the state is synced with the cluster.",
                                value=1 if self._synced() else 0)
        yield GaugeMetricFamily("devshare_extender_leader", "1 while this extender holds the leader lease.",
                                value=1 if self._leader() else 0)


class ExtenderMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "devshare_extender_requests", "Extender requests answered, by verb and result.",
            ["verb", "result"], registry=self.registry,
        )
        self.latency = Histogram(
            "devshare_extender_request_seconds", "Time to answer one extender request (body read to answer).",
            ["verb"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.failures = Counter(
            "devshare_extender_failures",
            "Nodes refused by filter and binds refused, by verb and reason class.",
            ["verb", "reason"], registry=self.registry,
        )

    def watch_state(self, state: Callable[[], ClusterState], synced: Callable[[], bool],
                    leader: Callable[[], bool]) -> None:
        """Export the state's gauges (read at scrape time)."""
        self.registry.register(_StateCollector(state, synced, leader))

    def fail(self, verb: str, reasons: Iterable[str]) -> None:
        counts: dict[str, int] = {}
        for r, n in Tally(reasons).items():  # distinct reasons are few; classify each once
            c = reason_class(r)
            counts[c] = counts.get(c, 0) + n
        for c, n in counts.items():
            self.failures.labels(verb, c).inc(n)
