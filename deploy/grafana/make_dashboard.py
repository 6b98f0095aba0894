"""Writes devshare-dashboard.json (run: python deploy/grafana/make_dashboard.py).

Every expression uses only metrics the extender exports (tests/deploy/test_grafana.py checks it
against a live /metrics). Import the JSON in Grafana (Dashboards > Import) and pick the Prometheus
data source that scrapes the extender (the Helm chart's ServiceMonitor, or --metrics-port).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

DS = {"type": "prometheus", "uid": "${datasource}"}
NODE = 'node=~"$node"'


def panel(title: str, kind: str, targets: list[tuple[str, str]], x: int, y: int, w: int, h: int,
          unit: str = "short", description: str = "", **options: Any) -> dict[str, Any]:
    p: dict[str, Any] = {
        "id": 0, "type": kind, "title": title, "description": description, "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit, **options.pop("defaults", {})}, "overrides": []},
        "targets": [{"refId": chr(65 + i), "datasource": DS, "expr": expr, "legendFormat": legend}
                    for i, (expr, legend) in enumerate(targets)],
    }
    p.update(options)
    return p


def quantiles(verb: str) -> list[tuple[str, str]]:
    rate = f'sum by (le) (rate(devshare_extender_request_seconds_bucket{{verb="{verb}"}}[$__rate_interval]))'
    return [(f"histogram_quantile({q}, {rate})", f"p{int(q * 100)}") for q in (0.5, 0.9, 0.99)]


def dashboard() -> dict[str, Any]:
    core = f'devshare_device_allocated_ratio{{type="gpu", resource="core", {NODE}}}'
    memory = f'devshare_device_allocated_ratio{{type="gpu", resource="memory", {NODE}}}'
    panels = [
        panel("GPUs allocated", "stat", [(f"sum({core})", "GPUs")], 0, 0, 4, 4,
              description="Allocated compute in whole GPUs (sum of every card's allocated share)."),
        panel("GPUs stranded", "stat", [("devshare_stranded_gpus", "GPUs")], 4, 0, 4, 4,
              description="Free compute no further share can use: its card has under 256 MiB free or is at the "
                          "container limit (docs/extender.md).",
              defaults={"thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None},
                                                                      {"color": "orange", "value": 1}]}}),
        panel("GPU cards", "stat", [('count(devshare_device_allocated_ratio{type="gpu", resource="core"})',
                                     "cards")], 8, 0, 4, 4),
        panel("Pods holding devices", "stat", [("sum by (phase) (devshare_extender_pods)", "{{phase}}")],
              12, 0, 4, 4),
        panel("Binds refused (5m)", "stat",
              [('sum(increase(devshare_extender_requests_total{verb="bind", result="error"}[5m]))', "refused")],
              16, 0, 4, 4),
        panel("Synced / leader", "stat", [("max(devshare_extender_synced)", "synced"),
                                          ("max(devshare_extender_leader)", "leader")], 20, 0, 4, 4),
        panel("Allocated compute per node (GPUs)", "timeseries",
              [(f"sum by (node) ({core})", "{{node}}")], 0, 4, 12, 8),
        panel("Allocated memory per node (share)", "timeseries",
              [(f"avg by (node) ({memory})", "{{node}}")], 12, 4, 12, 8, unit="percentunit"),
        panel("Allocated compute per card", "timeseries",
              [(core, "{{node}} gpu {{minor}}")], 0, 12, 12, 8, unit="percentunit"),
        panel("Allocated memory per card", "timeseries",
              [(memory, "{{node}} gpu {{minor}}")], 12, 12, 12, 8, unit="percentunit"),
        panel("Pods per card", "timeseries",
              [(f'devshare_device_containers{{{NODE}}}', "{{node}} {{type}} {{minor}}")], 0, 20, 12, 8),
        panel("Stranded GPUs per node", "timeseries",
              [(f'devshare_node_stranded_gpus{{{NODE}}}', "{{node}}"), ("devshare_stranded_gpus", "cluster")],
              12, 20, 12, 8),
        panel("Filter latency", "timeseries", quantiles("filter"), 0, 28, 8, 8, unit="s"),
        panel("Prioritize latency", "timeseries", quantiles("prioritize"), 8, 28, 8, 8, unit="s"),
        panel("Bind latency", "timeseries", quantiles("bind"), 16, 28, 8, 8, unit="s"),
        panel("Binds refused, by reason", "timeseries",
              [('sum by (reason) (rate(devshare_extender_failures_total{verb="bind"}[$__rate_interval]))',
                "{{reason}}")], 0, 36, 8, 8, unit="ops"),
        panel("Nodes refused by filter, by reason", "timeseries",
              [('sum by (reason) (rate(devshare_extender_failures_total{verb="filter"}[$__rate_interval]))',
                "{{reason}}")], 8, 36, 8, 8, unit="ops"),
        panel("Requests, by verb and result", "timeseries",
              [("sum by (verb, result) (rate(devshare_extender_requests_total[$__rate_interval]))",
                "{{verb}} {{result}}")], 16, 36, 8, 8, unit="reqps"),
    ]
    for i, p in enumerate(panels, start=1):
        p["id"] = i
    return {
        "title": "devshare: GPU sharing",
        "uid": "devshare-gpu-sharing",
        "description": "devshare extender: allocation per node and card, pods per card, stranded GPUs, "
                       "filter/bind latency and refusals.",
        "tags": ["devshare", "gpu", "kubernetes"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            {"name": "node", "type": "query", "datasource": DS, "label": "node", "includeAll": True, "multi": True,
             "allValue": ".*", "refresh": 2, "query": {"query": "label_values(devshare_device_containers, node)",
                                                       "refId": "node"},
             "definition": "label_values(devshare_device_containers, node)"},
        ]},
        "panels": panels,
    }


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    # the Helm chart ships the same file (grafanaDashboard.enabled: a ConfigMap for Grafana's sidecar)
    for out in (here / "devshare-dashboard.json", here.parent / "helm/devshare/files/devshare-dashboard.json"):
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(dashboard(), indent=2) + "\n")
        print(f"wrote {out}")
