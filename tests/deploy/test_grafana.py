"""deploy/grafana/devshare-dashboard.json: every expression names metrics (and label values) the
extender really exports, and the JSON is what deploy/grafana/make_dashboard.py writes."""

from __future__ import annotations

import importlib.util
import json
import re

from prometheus_client.parser import text_string_to_metric_families

from support import REPO
from support.extender import cluster, pod, post, running

ROOT = REPO
DASHBOARD = ROOT / "deploy" / "grafana" / "devshare-dashboard.json"
METRIC = re.compile(r"\b(devshare_[a-z_]+)\b(?:\{([^}]*)\})?")
MATCHER = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


def expressions() -> list[str]:
    data = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in data["panels"] for t in p["targets"]]
    exprs += [v["query"]["query"] for v in data["templating"]["list"] if isinstance(v.get("query"), dict)]
    return exprs


def test_dashboard_is_generated() -> None:
    spec = importlib.util.spec_from_file_location("make_dashboard", ROOT / "deploy" / "grafana" / "make_dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert json.loads(DASHBOARD.read_text()) == json.loads(json.dumps(module.dashboard()))


def test_dashboard_covers_what_operators_asked_for() -> None:
    text = " ".join(expressions())
    for needed in ('devshare_device_allocated_ratio{type="gpu", resource="core"',
                   'devshare_device_allocated_ratio{type="gpu", resource="memory"', "devshare_device_containers",
                   "devshare_stranded_gpus", "devshare_node_stranded_gpus", 'verb="filter"', 'verb="bind"',
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
    for expr in expressions():
        found = METRIC.findall(expr)
        assert found, f"no devshare metric in {expr!r}"
        for name, matchers in found:
            assert name in samples, f"{name} (in {expr!r}) is not exported; exported: {sorted(samples)}"
            for label, value in MATCHER.findall(matchers):
                if "$" in value:
                    continue  # a dashboard variable
                assert any(s.get(label) == value for s in samples[name]), (
                    f"{name}{{{label}={value!r}}} never appears in /metrics (in {expr!r})")
        for other in re.findall(r"\b([a-z_]+_(?:total|bucket|seconds|count|sum))\b", expr):
            assert other.startswith("devshare_"), f"{other} in {expr!r} is not a devshare metric"
