"""devshare.server.extender.metrics: the families over every device, written from the state's columns,
say what the state's inspect view says, device by device."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from devshare.engine.records import Conflict
from devshare.engine.state import ClusterState
from devshare.server.extender.metrics import ExtenderMetrics, device_families, reason_class
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


def test_the_exposition_adds_the_device_families_to_the_registry() -> None:
    state = ClusterState()
    add_node(state, "n0", 2)
    bound(state, "p", "n0", 1, core=500, memory=GiB)
    metrics = ExtenderMetrics()
    metrics.fail("filter", ["no card has 60% compute free"])
    assert reason_class("no card has 60% compute free") == "compute"
    metrics.watch_state(state, Synced(), Switch(leading=False))  # type: ignore[arg-type]
    got: dict[Any, float] = samples(asyncio.run(metrics.exposition()).decode())
    assert got[("devshare_extender_failures_total", (("reason", "compute"), ("verb", "filter")))] == 1.0
    assert got[("devshare_extender_pods", (("phase", "bound"),))] == 1.0
    assert got[("devshare_extender_leader", ())] == 0.0
    assert got[("devshare_device_allocated_ratio",
                (("minor", "1"), ("node", "n0"), ("resource", "core"), ("type", "gpu")))] == 0.5
