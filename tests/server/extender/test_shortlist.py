"""The shortlist (``scheduling.shortlist``): which pods have soft wishes kube-scheduler's own scoring
would weigh, and the filter answering with devshare's best nodes only for the others."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from devshare.config import Configuration, Scheduling
from devshare.server.extender.serve import ExtenderOptions
from devshare.server.extender.shortlist import has_soft_wishes
from support.extender import bind, cluster, names_body, pod, post, running

PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
TERM = {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
POD_TERM = {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}}}


def with_spec(**spec: Any) -> dict[str, Any]:
    p = pod("p", gpus=1)
    p["spec"].update(spec)
    return p


@pytest.mark.parametrize("spec", [
    {"affinity": {"nodeAffinity": {PREFERRED: [TERM]}}},
    {"affinity": {"podAffinity": {PREFERRED: [POD_TERM]}}},
    {"affinity": {"podAntiAffinity": {PREFERRED: [POD_TERM]}}},
    {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                                   {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                    "whenUnsatisfiable": "ScheduleAnyway"}]},
])
def test_preferences_kube_scheduler_scores_are_soft_wishes(spec: dict[str, Any]) -> None:
    assert has_soft_wishes(with_spec(**spec))


@pytest.mark.parametrize("spec", [
    {},
    {"nodeSelector": {"zone": "a"}},
    {"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [TERM["preference"]]}, PREFERRED: []}}},
    {"affinity": {"podAntiAffinity": {REQUIRED: [POD_TERM["podAffinityTerm"]]}}},
    {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
    {"tolerations": [{"key": "k", "operator": "Exists", "effect": "PreferNoSchedule"}]},
    {"affinity": None, "topologySpreadConstraints": None},
])
def test_filters_and_no_preference_are_no_soft_wish(spec: dict[str, Any]) -> None:
    assert not has_soft_wishes(with_spec(**spec))


def test_a_pod_of_any_shape_is_judged_without_error() -> None:
    for odd in ({}, {"spec": None}, {"spec": {"affinity": "x"}}, {"spec": {"affinity": {"nodeAffinity": []}}},
                {"spec": {"topologySpreadConstraints": ["x", 3]}}):
        assert has_soft_wishes(odd) is False


def options(k: int) -> ExtenderOptions:
    """The shortlist ``k`` with seed 000's binpack (its best node is plain to see: the fullest)."""
    scheduling = Scheduling(shortlist=k, node_policy="binpack")
    return ExtenderOptions(config=msgspec.structs.replace(Configuration(), scheduling=scheduling))


NODES = [f"node-{i}" for i in range(6)]
# node-3 is the fullest (binpack: the best for a one-GPU pod), then node-1; the others are empty
BUSY = [pod(f"busy-{n}-{g}", gpus=1, node_name=f"node-{n}",
            annotations={"devshare.io/allocation": msgspec.json.encode(
                {"node": f"node-{n}", "containers": [{"name": "main", "devices": [
                    {"type": "gpu", "minor": g, "id": f"GPU-node-{n}-{g}", "core": 100,
                     "memory": 16 * 2**30, "memoryRatio": 100}]}]}).decode()})
        for n, g in [(3, 0), (3, 1), (3, 2), (1, 0)]]


async def test_the_filter_passes_only_the_best_nodes_of_a_pod_without_soft_wishes() -> None:
    backend = cluster(nodes=6, gpus=4, pods=[*BUSY, pod("a", gpus=1)])
    async with running(backend, options(1)) as (client, runtime):
        best = runtime.extender.lifecycle.scheduler.place(runtime.extender.requests.parse(pod("a", gpus=1)))
        assert best is not None and best.node == "node-3"
        out = await post(client, "/filter", names_body(pod("a", gpus=1), NODES))
        assert out["NodeNames"] == ["node-3"]
        assert out["FailedNodes"] == {} and out["FailedAndUnresolvableNodes"] == {}  # the others did not fail
        assert await bind(client, "a", "node-3") == ""
    async with running(cluster(nodes=6, gpus=4, pods=list(BUSY)), options(2)) as (client, _):
        out = await post(client, "/filter", names_body(pod("a", gpus=1), NODES))
        assert out["NodeNames"] == ["node-3", "node-1"]  # best first


async def test_with_a_shortlist_failed_nodes_are_sent_only_when_no_node_passes() -> None:
    async with running(cluster(nodes=6, gpus=4, pods=list(BUSY)), options(1)) as (client, _):
        out = await post(client, "/filter", names_body(pod("a", gpus=3), NODES))
        assert out["NodeNames"] == ["node-1"] and out["FailedNodes"] == {}  # node-3 failed: nobody reads why
        out = await post(client, "/filter", names_body(pod("b", gpus=4), ["node-1", "node-3"]))
        assert out["NodeNames"] == [] and set(out["FailedNodes"]) == {"node-1", "node-3"}  # the pod's event


async def test_a_pod_with_soft_wishes_gets_every_node_that_fits() -> None:
    async with running(cluster(nodes=6, gpus=4, pods=list(BUSY)), options(1)) as (client, _):
        wishes = pod("w", gpus=1)
        wishes["spec"]["affinity"] = {"nodeAffinity": {PREFERRED: [TERM]}}
        out = await post(client, "/filter", names_body(wishes, NODES))
        assert sorted(out["NodeNames"]) == NODES


async def test_shortlist_zero_passes_every_node_that_fits() -> None:
    async with running(cluster(nodes=6, gpus=4, pods=list(BUSY)), options(0)) as (client, _):
        out = await post(client, "/filter", names_body(pod("a", gpus=3), NODES))
        assert sorted(out["NodeNames"]) == [n for n in NODES if n != "node-3"]  # node-3 has one card left
        assert set(out["FailedNodes"]) == {"node-3"}


async def test_a_shortlisted_filter_where_no_node_passes_evaluates_the_pod_once() -> None:
    """The failing nodes' reasons then come from the evaluation the shortlist was cut from."""
    async with running(cluster(nodes=6, gpus=4, pods=list(BUSY)), options(1)) as (client, runtime):
        scheduler = runtime.extender.lifecycle.scheduler
        calls: list[int] = []
        real = scheduler.evaluate

        def counting(p: Any, rows: Any) -> Any:
            calls.append(len(rows))
            return real(p, rows)

        scheduler.evaluate = counting  # type: ignore[method-assign]
        out = await post(client, "/filter", names_body(pod("b", gpus=4), ["node-1", "node-3"]))
        assert out["NodeNames"] == [] and set(out["FailedNodes"]) == {"node-1", "node-3"}
        assert calls == [2]
