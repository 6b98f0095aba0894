"""devshare.server.extender.metrics: the families over every device, written from the state's columns,
say what the state's inspect view says, device by device."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from devshare.engine.quotas import Quota, Quotas
from devshare.engine.records import Conflict
from devshare.engine.state import ClusterState
from devshare.server.extender.metrics import (
    CLUSTER_FAMILIES,
    ExtenderMetrics,
    device_families,
    namespace_families,
    reason_class,
)
from devshare.server.extender.occupancy import MIN_MEMORY
from support.cluster import GiB, MiB, add_node, bound
from support.extender import Switch


class Synced:
    synced = True

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def expected(state: ClusterState) -> Samples:
    """The families as the inspect view gives them, device by device, with the stranded rule of
    occupancy.py's module doc written out here."""
    out: Samples = {}
    total = 0.0
    for node in state.inspect()["nodes"]:
        stranded, gpus = 0.0, False
        for d in node["devices"]:
            at = (("minor", str(d["minor"])), ("node", node["name"]))
            tot, used = d["total"], d["used"]
            out[("devshare_device_allocated_ratio", (*at, ("resource", "core"), ("type", d["type"])))] = \
                used["core"] / tot["core"]
            if "memory" in tot:
                out[("devshare_device_allocated_ratio", (*at, ("resource", "memory"), ("type", d["type"])))] = \
                    used["memory"] / tot["memory"]
                out[("devshare_device_memory_bytes", (*at, ("type", d["type"])))] = tot["memory"]
                out[("devshare_device_memory_allocated_bytes", (*at, ("type", d["type"])))] = used["memory"]
            out[("devshare_device_containers", (*at, ("type", d["type"])))] = used["containers"]
            if d["type"] != "gpu":
                continue
            gpus = True
            free = tot["core"] - used["core"]
            short = tot["memory"] - used["memory"] < MIN_MEMORY
            full = used["containers"] >= state.max_containers
            if d["health"] and not d["heldOutside"] and free > 0 and used["containers"] and (short or full):
                stranded += free
        if gpus:
            out[("devshare_node_stranded_gpus", (("node", node["name"]),))] = stranded / 100
            total += stranded
    out[("devshare_stranded_gpus", ())] = total / 100
    return out


def same(got: Samples, want: Samples) -> None:
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert abs(got[k] - v) <= 1e-9 * max(1.0, abs(v)), k


@st.composite
def clusters(draw: st.DrawFn) -> ClusterState:
    state = ClusterState(max_containers_per_device=draw(st.integers(1, 4)))
    nodes = draw(st.integers(1, 6))
    for i in range(nodes):
        gpus = draw(st.integers(0, 4))
        add_node(state, f"node-{i}", [draw(st.sampled_from([1, 16])) * GiB for _ in range(gpus)],
                 rdma=draw(st.integers(0, 2)), unhealthy=draw(st.sets(st.integers(0, 3), max_size=1)))
    for k in range(draw(st.integers(0, 30))):
        node, minor = draw(st.integers(0, nodes - 1)), draw(st.integers(0, 3))
        core = draw(st.sampled_from([0, 50, 300, 700]))
        memory = draw(st.sampled_from([0, 100 * MiB, 900 * MiB, 8 * GiB]))
        with contextlib.suppress(Conflict, ValueError, KeyError):  # a card the node lacks: not placed
            bound(state, f"p{k}", f"node-{node}", minor, core=core, memory=memory)
    return state


@settings(max_examples=150, deadline=None)
@given(clusters())
def test_the_device_families_say_what_inspect_says(state: ClusterState) -> None:
    text = device_families(state.device_columns(), state.max_containers).decode()
    same(samples(text), expected(state))


def test_a_label_value_is_escaped() -> None:
    state = ClusterState()
    add_node(state, 'odd"node\\x', 1)  # no Kubernetes name looks like this: the writer escapes it anyway
    got = samples(device_families(state.device_columns(), state.max_containers).decode())
    assert got[("devshare_node_stranded_gpus", (("node", 'odd"node\\x'),))] == 0.0


def test_the_exposition_adds_the_device_families_to_the_registry_while_leading() -> None:
    """Issue 37: every replica exported the cluster's figures, so a dashboard's sum() counted each card
    once per replica. A follower exports its own counters and none of the cluster's figures; the
    moment it leads, all of them."""
    state = ClusterState()
    add_node(state, "n0", 2)
    bound(state, "p", "n0", 1, core=500, memory=GiB)
    metrics = ExtenderMetrics()
    metrics.fail("filter", ["no card has 60% compute free"])
    assert reason_class("no card has 60% compute free") == "compute"
    leadership = Switch(leading=False)
    metrics.watch_state(state, Synced(), leadership)  # type: ignore[arg-type]
    got: dict[Any, float] = samples(asyncio.run(metrics.exposition()).decode())
    assert got[("devshare_extender_failures_total", (("reason", "compute"), ("verb", "filter")))] == 1.0
    assert got[("devshare_extender_leader", ())] == 0.0
    assert got[("devshare_extender_synced", ())] == 1.0
    assert not {name for name, _ in got} & CLUSTER_FAMILIES
    leadership.leading = True
    got = samples(asyncio.run(metrics.exposition()).decode())
    assert got[("devshare_extender_leader", ())] == 1.0
    assert got[("devshare_extender_pods", (("phase", "bound"),))] == 1.0
    assert got[("devshare_device_allocated_ratio",
                (("minor", "1"), ("node", "n0"), ("resource", "core"), ("type", "gpu")))] == 0.5
    assert {name for name, _ in got} >= CLUSTER_FAMILIES - {"devshare_peer_pods", "devshare_peer_pods_conservative",
                                                             "devshare_namespace_gpu_quota",
                                                             "devshare_namespace_gpu_memory_quota_bytes"}


def test_gpu_memory_is_exported_in_bytes() -> None:
    """Issue 40: no capacity in bytes. Each card's memory and what is allocated of it, exact."""
    state = ClusterState()
    add_node(state, "n0", [80 * GiB, 24 * GiB], rdma=1)
    bound(state, "p", "n0", 0, core=300, memory=6 * GiB + 5)
    got = samples(device_families(state.device_columns(), state.max_containers).decode())
    at = (("minor", "0"), ("node", "n0"), ("type", "gpu"))
    assert got[("devshare_device_memory_bytes", at)] == 80 * GiB
    assert got[("devshare_device_memory_allocated_bytes", at)] == 6 * GiB + 5
    assert got[("devshare_device_memory_bytes", (("minor", "1"), ("node", "n0"), ("type", "gpu")))] == 24 * GiB
    assert not any(name.startswith("devshare_device_memory") and dict(labels)["type"] == "rdma"
                   for name, labels in got)  # a device type without memory has no memory series


def test_namespace_gpu_and_quotas() -> None:
    """The gauges the dashboard's quota panels read: what each namespace holds (every namespace holding
    GPUs, and every namespace with a quota) against its quota, compute in GPUs, memory in bytes."""
    state = ClusterState()
    add_node(state, "n0", 2)
    bound(state, "p", "n0", 0, core=500, memory=2 * GiB, ns="team-a")
    bound(state, "q", "n0", 1, core=250, memory=GiB, ns="team-b")
    quotas = Quotas({"team-a": Quota(core_milli=2000, memory=64 * GiB), "team-c": Quota(memory=GiB)})
    got = samples("".join(generate_latest_families(namespace_families(state, quotas))))
    def ns(n: str) -> tuple[tuple[str, str]]:
        return (("namespace", n),)
    assert got[("devshare_namespace_gpu_allocated", ns("team-a"))] == 0.5
    assert got[("devshare_namespace_gpu_allocated", ns("team-b"))] == 0.25
    assert got[("devshare_namespace_gpu_allocated", ns("team-c"))] == 0.0
    assert got[("devshare_namespace_gpu_memory_allocated_bytes", ns("team-a"))] == 2 * GiB
    assert got[("devshare_namespace_gpu_quota", ns("team-a"))] == 2.0
    assert got[("devshare_namespace_gpu_memory_quota_bytes", ns("team-a"))] == 64 * GiB
    assert got[("devshare_namespace_gpu_memory_quota_bytes", ns("team-c"))] == GiB
    assert ("devshare_namespace_gpu_quota", ns("team-b")) not in got  # no quota: no quota series
    assert ("devshare_namespace_gpu_quota", ns("team-c")) not in got  # a memory quota only


def generate_latest_families(families: list[Any]) -> list[str]:
    registry = CollectorRegistry()

    class Fixed:
        def collect(self) -> list[Any]:
            return families

    registry.register(Fixed())  # type: ignore[arg-type]
    return [generate_latest(registry).decode()]


@settings(max_examples=60, deadline=None)
@given(clusters(), st.booleans())
def test_only_the_leader_exports_the_clusters_figures(state: ClusterState, leading: bool) -> None:
    """Whatever the cluster: a follower's scrape holds none of the cluster's families, so a sum over a
    leader and any number of followers is the leader's; the leader's holds every device's."""
    metrics = ExtenderMetrics()
    metrics.watch_state(state, Synced(), Switch(leading=leading))  # type: ignore[arg-type]
    got = samples(asyncio.run(metrics.exposition()).decode())
    names = {name for name, _ in got}
    if not leading:
        assert not names & CLUSTER_FAMILIES
        return
    assert {"devshare_stranded_gpus", "devshare_extender_pods"} <= names
    devices = sum(len(n["devices"]) for n in state.inspect()["nodes"])  # (none: no per-device series at all)
    assert sum(1 for name, _ in got if name == "devshare_device_containers") == devices
