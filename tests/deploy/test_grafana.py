"""deploy/grafana/devshare-dashboard.json: every expression names metrics (and label values) the
extender really exports, or those make_dashboard.py declares as the node agent's (AGENT_METRICS) or as
the extender's quota gauges still to come (QUOTA_METRICS), with the labels declared there; the filters
apply to every panel that has the label; and the JSON is what deploy/grafana/make_dashboard.py writes."""

from __future__ import annotations

import importlib.util
import json
import re
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from support import REPO
from support.extender import cluster, pod, post, running

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
DECLARED: dict[str, tuple[str, ...]] = {**MAKER.AGENT_METRICS, **MAKER.QUOTA_METRICS}


def test_dashboard_is_generated() -> None:
    assert json.loads(DASHBOARD.read_text()) == json.loads(json.dumps(MAKER.dashboard()))


def test_filters_apply_to_every_panel_with_the_label() -> None:
    """Issue 40: "GPU cards" and "GPUs stranded" ignored $node. Every selector of a metric that carries a
    node (or namespace) label filters on it; a panel whose metrics carry none is in the extender's row,
    whose title says it covers all nodes."""
    labelled = {"node": {"devshare_device_allocated_ratio", "devshare_device_containers",
                         "devshare_node_stranded_gpus", *MAKER.AGENT_METRICS},
                "namespace": {*MAKER.AGENT_METRICS, *MAKER.QUOTA_METRICS}}
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


def test_declared_metrics_are_not_exported_by_the_extender_yet_or_match() -> None:
    """The agent's metrics are the agent's (its own /metrics); the quota gauges are the extender's, still
    to come: each carries the labels its panels use."""
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


async def exported() -> dict[str, list[dict[str, str]]]:
    """Sample name -> label sets, from a live extender that filtered, bound and refused a bind."""
    backend = cluster(nodes=2, gpus=2, pods=[pod("p", core=30)], no_device_nodes=1)
    async with running(backend) as (client, _):
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
    for name in MAKER.QUOTA_METRICS:  # when the extender exports them, check them live: drop them from QUOTA_METRICS
        assert name not in samples, f"{name} is exported now: remove it from QUOTA_METRICS"
    for expr in expressions():
        found = METRIC.findall(expr)
        assert found, f"no devshare metric in {expr!r}"
        for name, matchers in found:
            if name in DECLARED:
                continue  # the node agent's, or still to come (test_declared_metrics_...)
            assert name in samples, f"{name} (in {expr!r}) is not exported; exported: {sorted(samples)}"
            for label, value in MATCHER.findall(matchers):
                if "$" in value:
                    continue  # a dashboard variable
                assert any(s.get(label) == value for s in samples[name]), (
                    f"{name}{{{label}={value!r}}} never appears in /metrics (in {expr!r})")
        for other in re.findall(r"\b([a-z_]+_(?:total|bucket|seconds|count|sum))\b", expr):
            assert other.startswith("devshare_"), f"{other} in {expr!r} is not a devshare metric"
