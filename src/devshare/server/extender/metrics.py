"""The extender's Prometheus metrics, in a registry of their own (one per server); docs/metrics.md
lists them for operators.

Every replica exports what it did itself: ``devshare_extender_requests_total{verb, result}`` (result
``ok``, ``error``: an answer carrying an Error, ``malformed``: 400, ``not_ready``),
``devshare_extender_request_seconds{verb}``, ``devshare_extender_failures_total{verb, reason}``
(per-node filter failures and bind errors by reason class, :func:`reason_class`; with a shortlist a
filter that passes a node counts only its unknown nodes), ``devshare_extender_synced``,
``devshare_extender_leader`` and ``devshare_build_info``.

The figures of the cluster (:data:`CLUSTER_FAMILIES`: per device, per node, per namespace, the pods
holding devices, peers' pods) are exported by the leader only: every replica watches the same
cluster, so with two replicas a dashboard's ``sum()`` would count each card twice. A follower
exports none of them (rather than a ``leader`` label every query would have to filter on: a plain
``sum()`` stays right, and so do operators' own queries and alerts); it starts exporting them the
moment it leads. An extender without leader election always leads.

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

from prometheus_client import Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from devshare.engine.quotas import Quotas
from devshare.engine.state import ClusterState
from devshare.engine.stateview import DeviceColumns
from devshare.model.names import GPU
from devshare.server.extender.occupancy import stranded_core
from devshare.server.extender.view import ClusterView, Leadership
from devshare.server.metrics import LATENCY_BUCKETS, new_registry

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
    (" quota ", "quota"),
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
MEMORY = "devshare_device_memory_bytes"
MEMORY_ALLOCATED = "devshare_device_memory_allocated_bytes"
CONTAINERS = "devshare_device_containers"
NODE_STRANDED = "devshare_node_stranded_gpus"
STRANDED = "devshare_stranded_gpus"
_HELP = {
    RATIO: "Allocated share of each device (0 to 1), by resource: core (compute) or memory.",
    MEMORY: "Memory of each device (GPU memory), in bytes.",
    MEMORY_ALLOCATED: "Memory of each device allocated to pods, in bytes.",
    CONTAINERS: "Containers holding a share of each device (a pod of two containers on one card counts two).",
    NODE_STRANDED: "Free GPU compute of each node that no further pod can use, in GPUs: its card has under "
                   "256 MiB of memory free or holds the most containers a card may hold.",
    STRANDED: "Free GPU compute of the cluster that no further pod can use, in GPUs (the sum over nodes).",
}
NAMESPACE_GPU = "devshare_namespace_gpu_allocated"
NAMESPACE_GPU_QUOTA = "devshare_namespace_gpu_quota"
NAMESPACE_MEMORY = "devshare_namespace_gpu_memory_allocated_bytes"
NAMESPACE_MEMORY_QUOTA = "devshare_namespace_gpu_memory_quota_bytes"
PODS = "devshare_extender_pods"
PEER_PODS = "devshare_peer_pods"
PEER_PODS_CONSERVATIVE = "devshare_peer_pods_conservative"
# what only the leader exports (see the module's doc)
CLUSTER_FAMILIES = frozenset({RATIO, MEMORY, MEMORY_ALLOCATED, CONTAINERS, NODE_STRANDED, STRANDED, NAMESPACE_GPU,
                              NAMESPACE_GPU_QUOTA, NAMESPACE_MEMORY, NAMESPACE_MEMORY_QUOTA, PODS, PEER_PODS,
                              PEER_PODS_CONSERVATIVE})


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
    memory, allocated = [_head(MEMORY)], [_head(MEMORY_ALLOCATED)]
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
        if cols.memory:  # bytes, written as integers (exact where a float's repr would not be)
            memory += [f'{MEMORY}{{{lab},type="{kind}"}} {b}\n' for lab, b in zip(labels, cols.total_mem.tolist(),
                                                                                  strict=True)]
            allocated += [f'{MEMORY_ALLOCATED}{{{lab},type="{kind}"}} {b}\n'
                          for lab, b in zip(labels, cols.used_mem.tolist(), strict=True)]
        containers += [f'{CONTAINERS}{{{lab},type="{kind}"}} {float(c)!r}\n'
                       for lab, c in zip(labels, cols.containers.tolist(), strict=True)]
        if cols.type == GPU:
            for n, pct in zip(cols.node, stranded_core(cols, max_containers).tolist(), strict=True):
                stranded_of[n] = stranded_of.get(n, 0.0) + pct
    nodes = [_head(NODE_STRANDED)] + [f'{NODE_STRANDED}{{node="{_label(n)}"}} {pct / 100!r}\n'
                                        for n, pct in stranded_of.items()]
    total = sum(stranded_of.values()) / 100
    return "".join([*ratio, *memory, *allocated, *containers, *nodes, _head(STRANDED),
                    f"{STRANDED} {total!r}\n"]).encode()


class _StateCollector(Collector):
    """Whether this replica is synced and leads; the cluster's figures when it leads."""

    def __init__(self, state: ClusterState, cluster: ClusterView, leadership: Leadership,
                 quotas: Quotas | None) -> None:
        self.state = state
        self.cluster = cluster
        self.leadership = leadership
        self.quotas = quotas

    def collect(self) -> Iterator[GaugeMetricFamily]:
        leading = self.leadership.may_write()
        yield GaugeMetricFamily("devshare_extender_synced", "1 once this extender has read the whole cluster "
                                "(nodes, devices, pods) and may answer kube-scheduler.",
                                value=1 if self.cluster.synced else 0)
        yield GaugeMetricFamily("devshare_extender_leader", "1 while this extender leads: it binds pods and "
                                "exports the cluster's figures (one replica at a time).", value=1 if leading else 0)
        if leading:
            yield from self._cluster()

    def _cluster(self) -> Iterator[GaugeMetricFamily]:
        state = self.state
        pods = GaugeMetricFamily(PODS, "Pods holding devices, by phase: assumed (devices reserved, bind under "
                                 "way) or bound.", labels=["phase"])
        counts = {"assumed": 0, "bound": 0}
        peers: Tally[str] = Tally()
        flagged: Tally[str] = Tally()
        for rec in state.pods.values():
            counts[rec.phase] = counts.get(rec.phase, 0) + 1
            if rec.peer is not None:
                peers[rec.peer] += 1
                if rec.problems:
                    flagged[rec.peer] += 1
        for phase, n in sorted(counts.items()):
            pods.add_metric([phase], n)
        yield pods
        peer = GaugeMetricFamily(PEER_PODS, "Running pods another scheduler placed (HAMi, Koordinator, Volcano, "
                                 "gpushare...), whose devices devshare counts as taken, by that scheduler.",
                                 labels=["scheduler"])
        unsure = GaugeMetricFamily(PEER_PODS_CONSERVATIVE, "Of those, pods whose cards could not all be matched "
                                   "exactly: counted as taking the whole card (see the pod's warning in the log).",
                                   labels=["scheduler"])
        for name in sorted(peers):
            peer.add_metric([name], peers[name])
            unsure.add_metric([name], flagged[name])
        yield peer
        yield unsure
        yield from namespace_families(state, self.quotas)


def namespace_families(state: ClusterState, quotas: Quotas | None) -> list[GaugeMetricFamily]:
    """GPU compute and memory each namespace holds (every namespace holding GPUs, and every namespace
    with a quota), and its quota where it has one (engine/quotas.py's figures)."""
    core = GaugeMetricFamily(NAMESPACE_GPU, "GPU compute the pods of the namespace hold, in GPUs (every request "
                             "dialect summed; 0.5 is half a card).", labels=["namespace"])
    memory = GaugeMetricFamily(NAMESPACE_MEMORY, "GPU memory the pods of the namespace hold, in bytes.",
                               labels=["namespace"])
    core_quota = GaugeMetricFamily(NAMESPACE_GPU_QUOTA, "GPU compute the namespace may hold (its quota), in GPUs.",
                                   labels=["namespace"])
    memory_quota = GaugeMetricFamily(NAMESPACE_MEMORY_QUOTA, "GPU memory the namespace may hold (its quota), "
                                     "in bytes.", labels=["namespace"])
    limits = quotas.limits if quotas else {}
    for ns in sorted(set(state.namespace_gpu) | set(limits)):
        used = state.namespace_gpu.get(ns) or (0, 0)
        core.add_metric([ns], used[0] / 1000)
        memory.add_metric([ns], used[1])
        quota = limits.get(ns)
        if quota is not None and quota.core_milli is not None:
            core_quota.add_metric([ns], quota.core_milli / 1000)
        if quota is not None and quota.memory is not None:
            memory_quota.add_metric([ns], quota.memory)
    return [core, memory, core_quota, memory_quota]


class ExtenderMetrics:
    def __init__(self) -> None:
        self.state: ClusterState | None = None  # whose devices the exposition adds
        self.leadership: Leadership | None = None  # whether it adds them (the leader only)
        self.registry = new_registry()
        self.requests = Counter(
            "devshare_extender_requests", "Requests of kube-scheduler answered (filter, prioritize, bind, preempt), by "
            "verb and result: ok, error (the answer refuses), malformed (a body that could not be read: 400) or "
            "not_ready (before the cluster was read).",
            ["verb", "result"], registry=self.registry,
        )
        self.latency = Histogram(
            "devshare_extender_request_seconds", "Time to answer one request of kube-scheduler, in seconds (from the "
            "request read to the answer ready).",
            ["verb"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )
        self.failures = Counter(
            "devshare_extender_failures",
            "Nodes refused at filter and binds refused, by verb and by kind of reason (compute, device-memory, "
            "quota, not-leader...).",
            ["verb", "reason"], registry=self.registry,
        )

    def watch_state(self, state: ClusterState, cluster: ClusterView, leadership: Leadership,
                    quotas: Quotas | None = None) -> None:
        """Export the state's gauges (read at scrape time, while this replica leads)."""
        self.registry.register(_StateCollector(state, cluster, leadership, quotas))
        self.state = state
        self.leadership = leadership

    async def exposition(self) -> bytes:
        """What ``GET /metrics`` answers: the registry's metrics, then the families over every device
        (:func:`device_families`), written in a thread from a copy of the state's columns taken here,
        on the event loop, so the state may change meanwhile."""
        head = generate_latest(self.registry)
        if self.state is None or self.leadership is None or not self.leadership.may_write():
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
