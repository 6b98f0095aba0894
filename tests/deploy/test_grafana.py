"""deploy/grafana/devshare-dashboard.json: every expression names metrics (and label values) the
extender really exports, or those make_dashboard.py declares as the node agent's (AGENT_METRICS), with
the labels declared there; the filters apply to every panel that has the label; its sums count each
card once with two extender replicas; and the JSON is what deploy/grafana/make_dashboard.py writes."""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devshare.config import parse_config
from devshare.server.extender.serve import ExtenderOptions
from support import REPO
from support.extender import Switch, cluster, pod, post, running

ROOT = REPO
DASHBOARD = ROOT / "deploy" / "grafana" / "devshare-dashboard.json"
METRIC = re.compile(r"\b(devshare_[a-z_]+)\b(?:\{([^}]*)\})?")
MATCHER = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


def expressions() -> list[str]:
    data = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in data["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in data["templating"]["list"] if isinstance(v.get("query"), dict)]
    return exprs


def make_dashboard() -> Any:
    spec = importlib.util.spec_from_file_location("make_dashboard", ROOT / "deploy" / "grafana" / "make_dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKER = make_dashboard()
DECLARED: dict[str, tuple[str, ...]] = dict(MAKER.AGENT_METRICS)


def test_dashboard_is_generated() -> None:
    assert json.loads(DASHBOARD.read_text()) == json.loads(json.dumps(MAKER.dashboard()))


def test_filters_apply_to_every_panel_with_the_label() -> None:
    """Issue 40: "GPU cards" and "GPUs stranded" ignored $node. Every selector of a metric that carries a
    node (or namespace) label filters on it; a panel whose metrics carry none is in the extender's row,
    whose title says it covers all nodes."""
    labelled = {"node": {"devshare_device_allocated_ratio", "devshare_device_containers",
                         "devshare_node_stranded_gpus", "devshare_device_memory_bytes",
                         "devshare_device_memory_allocated_bytes", *MAKER.AGENT_METRICS},
                "namespace": {*MAKER.AGENT_METRICS, "devshare_namespace_gpu_allocated", "devshare_namespace_gpu_quota",
                              "devshare_namespace_gpu_memory_allocated_bytes",
                              "devshare_namespace_gpu_memory_quota_bytes"}}
    data = json.loads(DASHBOARD.read_text())
    section = ""
    for p in data["panels"]:
        if p["type"] == "row":
            section = p["title"]
            continue
        names_in_panel = set()
        for t in p["targets"]:
            for name, matchers in METRIC.findall(t["expr"]):
                names_in_panel.add(name)
                for label, variable in (("node", "$node"), ("namespace", "$namespace")):
                    if name in labelled[label]:
                        assert f'{label}=~"{variable}"' in matchers, (p["title"], t["expr"])
                        assert variable in section, (p["title"], section)
        if not names_in_panel & (labelled["node"] | labelled["namespace"]):
            assert "all nodes" in section, p["title"]
    titles = {p["title"] for p in data["panels"]}
    assert "Pods per card" not in titles and "Containers per device" in titles  # it plots containers


def test_the_agents_metrics_carry_the_labels_the_panels_use() -> None:
    """The agent's metrics are the agent's (its own /metrics): each carries the labels its panels use."""
    for expr in expressions():
        for name, matchers in METRIC.findall(expr):
            if name in DECLARED:
                for label, _ in MATCHER.findall(matchers):
                    assert label in DECLARED[name], (name, label)
                for by in re.findall(r"by \(([^)]*)\)", expr):
                    assert {b.strip() for b in by.split(",")} <= set(DECLARED[name]), (expr, by)


def test_dashboard_covers_what_operators_asked_for() -> None:
    text = " ".join(expressions())
    for needed in ('devshare_device_allocated_ratio{type="gpu", resource="core"',
                   'devshare_device_allocated_ratio{type="gpu", resource="memory"', "devshare_device_containers",
                   "devshare_node_stranded_gpus", "devshare_container_gpu_memory_used_bytes",
                   "devshare_container_gpu_utilization_ratio", "devshare_namespace_gpu_quota",
                   'verb="filter"', 'verb="bind"',
                   'devshare_extender_failures_total{verb="bind"}'):
        assert needed in text, needed


# a quota on the test pods' namespace: the quota gauges are exported (and checked) with real figures
QUOTAS = parse_config({"apiVersion": "devshare.io/v1alpha1", "kind": "DevshareConfiguration",
                       "quotas": {"default": {"gpuCore": 200, "gpuMemory": "64Gi"}}})


async def exported() -> dict[str, list[dict[str, str]]]:
    """Sample name -> label sets, from a live extender that filtered, bound and refused a bind."""
    backend = cluster(nodes=2, gpus=2, pods=[pod("p", core=30)], no_device_nodes=1)
    async with running(backend, ExtenderOptions(config=QUOTAS)) as (client, _):
        names = ["node-0", "node-1", "plain-0"]  # plain-0 has no devices: a filter failure
        await post(client, "/filter", {"Pod": pod("p", core=30), "Nodes": None, "NodeNames": names})
        await post(client, "/prioritize", {"Pod": pod("p", core=30), "Nodes": None, "NodeNames": ["node-0"]})
        await post(client, "/bind", {"PodName": "p", "PodNamespace": "default", "PodUID": "uid-default-p",
                                     "Node": "node-0"})
        await post(client, "/bind", {"PodName": "ghost", "PodNamespace": "default", "PodUID": "x", "Node": "node-0"})
        text = await (await client.get("/metrics")).text()
    out: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(dict(s.labels))
    return out


async def test_every_expression_names_an_exported_metric() -> None:
    samples = await exported()
    assert not hasattr(MAKER, "QUOTA_METRICS")  # issue 40: the quota gauges are exported, and checked live here
    for expr in expressions():
        found = METRIC.findall(expr)
        assert found, f"no devshare metric in {expr!r}"
        for name, matchers in found:
            if name in DECLARED:
                continue  # the node agent's (test_the_agents_metrics_...)
            assert name in samples, f"{name} (in {expr!r}) is not exported; exported: {sorted(samples)}"
            for label, value in MATCHER.findall(matchers):
                if "$" in value:
                    continue  # a dashboard variable
                assert any(s.get(label) == value for s in samples[name]), (
                    f"{name}{{{label}={value!r}}} never appears in /metrics (in {expr!r})")
        for other in re.findall(r"\b([a-z_]+_(?:total|bucket|seconds|count|sum))\b", expr):
            assert other.startswith("devshare_"), f"{other} in {expr!r} is not a devshare metric"


AGGREGATE = re.compile(r"^(sum|count)(?: by \(([^)]*)\))? ?\((devshare_[a-z_]+)(?:\{([^}]*)\})?\)$")


def evaluate(expr: str, scrapes: list[list[tuple[str, dict[str, str], float]]]) -> dict[tuple[str, ...], float]:
    """``sum|count [by (labels)] (metric{matchers})`` over the samples of every scrape (one per replica,
    as Prometheus keeps each target's series apart), with $node and $namespace meaning all."""
    m = AGGREGATE.match(expr)
    assert m is not None, expr
    op, by, name, matchers = m.groups()
    keys = [b.strip() for b in by.split(",")] if by else []
    wanted = [(label, re.compile(value.replace("$node", ".*").replace("$namespace", ".*")), op_)
              for label, op_, value in re.findall(r'(\w+)\s*(=~|=)\s*"([^"]*)"', matchers or "")]
    out: dict[tuple[str, ...], float] = {}
    for samples in scrapes:
        for sample_name, labels, value in samples:
            if sample_name != name or not all(rx.fullmatch(labels.get(label, "")) for label, rx, _ in wanted):
                continue
            group = tuple(labels.get(k, "") for k in keys)
            out[group] = out.get(group, 0.0) + (value if op == "sum" else 1.0)
    return out


def scrape(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples]


async def test_two_replicas_count_each_card_once() -> None:
    """Issue 37: every replica exported the device gauges, so with two replicas the dashboard's sum()
    counted every card twice. A leader and a follower over one cluster, both scraped: every sum and
    count of the dashboard gives what one extender alone gives, and the figures are the cluster's."""
    pods = [pod("a", core=30, mem="2Gi"), pod("b", core=100)]
    backend = cluster(nodes=2, gpus=2, pods=pods)
    exprs = [e for e in expressions() if AGGREGATE.match(e)]
    assert len(exprs) >= 5, exprs
    async with running(backend, ExtenderOptions(config=QUOTAS), leadership=Switch(True)) as (leader, _), \
            running(backend, ExtenderOptions(config=QUOTAS), leadership=Switch(False)) as (follower, _):
        for name, node in (("a", "node-0"), ("b", "node-1")):
            assert (await post(leader, "/bind", {"PodName": name, "PodNamespace": "default",
                                                 "PodUID": f"uid-default-{name}", "Node": node}))["Error"] == ""
        alone = scrape(await (await leader.get("/metrics")).text())
        both = [alone, scrape(await (await follower.get("/metrics")).text())]
    for expr in exprs:
        assert evaluate(expr, both) == evaluate(expr, [alone]), expr
    gpus = 'sum(devshare_device_allocated_ratio{type="gpu", resource="core", node=~"$node"})'
    assert gpus in exprs
    assert evaluate(gpus, both) == {(): pytest.approx(1.3)}  # 30% of a card and a whole one
    cards = 'count(devshare_device_allocated_ratio{type="gpu", resource="core", node=~"$node"})'
    assert evaluate(cards, both) == {(): 4.0}  # two nodes of two GPUs
    assert evaluate("sum by (phase) (devshare_extender_pods)", both) == {("assumed",): 0.0, ("bound",): 2.0}
    assert evaluate('sum(devshare_namespace_gpu_allocated{namespace=~"$namespace"})', both) == {(): pytest.approx(1.3)}
