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

The families over every device are not in the registry: :func:`device_families` writes them from a
copy of the state's device columns, in a thread (:meth:`ExtenderMetrics.exposition`). At 5,000 nodes
of 8 GPUs they are 125,000 samples, and prometheus_client's writer held the event loop 1.3 s for them
at every scrape: every filter and bind waited (BENCHMARKS.md, issue 11's fifteenth stop).
"""

from __future__ import annotations

import asyncio
from collections import Counter as Tally
from collections.abc import Iterable, Iterator
from functools import lru_cache
from itertools import compress

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from devshare.engine.state import ClusterState
from devshare.engine.stateview import DeviceColumns
from devshare.model.names import GPU
from devshare.server.extender.occupancy import stranded_core
from devshare.server.extender.view import ClusterView, Leadership
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


RATIO = "devshare_device_allocated_ratio"
CONTAINERS = "devshare_device_containers"
NODE_STRANDED = "devshare_node_stranded_gpus"
STRANDED = "devshare_stranded_gpus"
_HELP = {
    RATIO: "Allocated share of each device (0..1), by resource: core (compute) or memory.",
    CONTAINERS: "Containers holding a share of each device (pods per card).",
    NODE_STRANDED: "GPU compute no further share can use, per node, in GPUs (occupancy.py defines stranded).",
    STRANDED: "GPU compute no further share can use, cluster-wide, in GPUs.",
}


def _head(name: str) -> str:
    return f"# HELP {name} {_HELP[name]}\n# TYPE {name} gauge\n"


def _label(value: str) -> str:
    """A label value escaped as the text format wants (backslash, double quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def device_families(columns: list[DeviceColumns], max_containers: int) -> bytes:
    """The per-device and stranded families in Prometheus's text format, as prometheus_client writes
    them (labels sorted by name, values as Python floats: every value here is a small finite number),
    in list comprehensions over the columns: tens of milliseconds for 40,000 devices."""
    ratio, containers = [_head(RATIO)], [_head(CONTAINERS)]
    stranded_of: dict[str, float] = {}  # node -> stranded percent of its GPUs
    for cols in columns:
        kind = _label(cols.type)
        escaped = {n: _label(n) for n in set(cols.node)}
        labels = [f'minor="{m}",node="{escaped[n]}"' for m, n in zip(cols.minor.tolist(), cols.node, strict=True)]
        for resource, total, used in (("core", cols.total_core, cols.used_core),
                                      ("memory", cols.total_mem, cols.used_mem)):
            if resource == "memory" and not cols.memory:
                continue
            has = total > 0
            values = (used[has] / total[has]).tolist()
            ratio += [f'{RATIO}{{{lab},resource="{resource}",type="{kind}"}} {v!r}\n'
                      for lab, v in zip(compress(labels, has.tolist()), values, strict=True)]
        containers += [f'{CONTAINERS}{{{lab},type="{kind}"}} {float(c)!r}\n'
                       for lab, c in zip(labels, cols.containers.tolist(), strict=True)]
        if cols.type == GPU:
            for n, pct in zip(cols.node, stranded_core(cols, max_containers).tolist(), strict=True):
                stranded_of[n] = stranded_of.get(n, 0.0) + pct
    nodes = [_head(NODE_STRANDED)] + [f'{NODE_STRANDED}{{node="{_label(n)}"}} {pct / 100!r}\n'
                                        for n, pct in stranded_of.items()]
    total = sum(stranded_of.values()) / 100
    return "".join([*ratio, *containers, *nodes, _head(STRANDED), f"{STRANDED} {total!r}\n"]).encode()


class _StateCollector(Collector):
    def __init__(self, state: ClusterState, cluster: ClusterView, leadership: Leadership) -> None:
        self.state = state
        self.cluster = cluster
        self.leadership = leadership

    def collect(self) -> Iterator[GaugeMetricFamily]:
        state = self.state
        pods = GaugeMetricFamily("devshare_extender_pods", "Pods holding devices, by phase (assumed, bound).",
                                 labels=["phase"])
        counts = {"assumed": 0, "bound": 0}
        for rec in state.pods.values():
            counts[rec.phase] = counts.get(rec.phase, 0) + 1
        for phase, n in sorted(counts.items()):
            pods.add_metric([phase], n)
        yield pods
        yield GaugeMetricFamily("devshare_extender_synced", "1 once the state is synced with the cluster.",
                                value=1 if self.cluster.synced else 0)
        yield GaugeMetricFamily("devshare_extender_leader", "1 while this extender holds the leader lease.",
                                value=1 if self.leadership.may_write() else 0)


class ExtenderMetrics:
    def __init__(self) -> None:
        self.state: ClusterState | None = None  # whose devices the exposition adds
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

    def watch_state(self, state: ClusterState, cluster: ClusterView, leadership: Leadership) -> None:
        """Export the state's gauges (read at scrape time)."""
        self.registry.register(_StateCollector(state, cluster, leadership))
        self.state = state

    async def exposition(self) -> bytes:
        """What ``GET /metrics`` answers: the registry's metrics, then the families over every device
        (:func:`device_families`), written in a thread from a copy of the state's columns taken here,
        on the event loop, so the state may change meanwhile."""
        head = generate_latest(self.registry)
        if self.state is None:
            return head
        state = self.state
        return head + await asyncio.to_thread(device_families, state.device_columns(), state.max_containers)

    def fail(self, verb: str, reasons: Iterable[str]) -> None:
        counts: dict[str, int] = {}
        for r, n in Tally(reasons).items():  # distinct reasons are few; classify each once
            c = reason_class(r)
            counts[c] = counts.get(c, 0) + n
        for c, n in counts.items():
            self.failures.labels(verb, c).inc(n)
