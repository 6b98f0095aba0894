"""Writes devshare-dashboard.json (run: python deploy/grafana/make_dashboard.py).

Every expression uses metrics the extender exports (tests/deploy/test_grafana.py checks them against a
live /metrics), but those of AGENT_METRICS (the node agent's /metrics). Import the JSON in Grafana
(Dashboards > Import) and pick the Prometheus data source that scrapes the extender (the Helm chart's
ServiceMonitor, or --metrics-port) and the node agents (the chart's PodMonitor).

The figures of the cluster (devices, nodes, namespaces, pods) come from the leading extender only
(docs/metrics.md): with several replicas a plain sum() counts each card once.
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


# Metrics the dashboard charts that the extender does not export: the node agent's (it serves them on
# its own /metrics; labels: namespace, pod, container, node, uuid). tests/deploy/test_grafana.py checks
# every other expression against a live extender's /metrics, and these against this contract.
AGENT_METRICS = {
    "devshare_container_gpu_memory_used_bytes": ("namespace", "pod", "container", "node", "uuid"),
    "devshare_container_gpu_utilization_ratio": ("namespace", "pod", "container", "node", "uuid"),
}
NAMESPACE = 'namespace=~"$namespace"'


def row(title: str, y: int) -> dict[str, Any]:
    return {"id": 0, "type": "row", "title": title, "collapsed": False, "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
            "panels": []}


def dashboard() -> dict[str, Any]:
    """Every panel of the device rows follows $node, every panel of the namespace rows $namespace; the
    extender row is about the extender itself (requests, latency), which has no node."""
    core = f'devshare_device_allocated_ratio{{type="gpu", resource="core", {NODE}}}'
    memory = f'devshare_device_allocated_ratio{{type="gpu", resource="memory", {NODE}}}'
    mem_total = f'devshare_device_memory_bytes{{type="gpu", {NODE}}}'
    mem_used = f'devshare_device_memory_allocated_bytes{{type="gpu", {NODE}}}'
    used = f"devshare_container_gpu_memory_used_bytes{{{NODE}, {NAMESPACE}}}"
    util = f"devshare_container_gpu_utilization_ratio{{{NODE}, {NAMESPACE}}}"
    panels = [
        row("GPUs of the selected nodes ($node)", 0),
        panel("GPUs allocated", "stat", [(f"sum({core})", "GPUs")], 0, 1, 6, 4,
              description="Allocated compute on the selected nodes, in whole GPUs (the sum of every card's "
                          "allocated share)."),
        panel("GPUs stranded", "stat", [(f"sum(devshare_node_stranded_gpus{{{NODE}}})", "GPUs")], 6, 1, 6, 4,
              description="Free compute of the selected nodes that no further share can use, in GPUs: its card "
                          "has under 256 MiB free or is at the container limit (docs/extender.md).",
              defaults={"thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None},
                                                                      {"color": "orange", "value": 1}]}}),
        panel("GPU cards", "stat", [(f'count(devshare_device_allocated_ratio{{type="gpu", resource="core", {NODE}}})',
                                     "cards")], 12, 1, 6, 4, description="GPU cards on the selected nodes."),
        panel("Containers holding a GPU share", "stat",
              [(f'sum(devshare_device_containers{{type="gpu", {NODE}}})', "containers")], 18, 1, 6, 4,
              description="Containers holding a share of a GPU of the selected nodes (one container on two cards "
                          "counts twice)."),
        panel("Allocated GPU compute per node (GPUs)", "timeseries",
              [(f"sum by (node) ({core})", "{{node}}")], 0, 5, 12, 8),
        panel("GPU memory per node: allocated and capacity", "timeseries",
              [(f"sum by (node) ({mem_used})", "{{node}} allocated"),
               (f"sum by (node) ({mem_total})", "{{node}} capacity")], 12, 5, 12, 8, unit="bytes",
              description="GPU memory allocated to pods on each selected node, beside the memory of its GPUs."),
        panel("Allocated compute per GPU card (share)", "timeseries",
              [(core, "{{node}} gpu {{minor}}")], 0, 13, 12, 8, unit="percentunit"),
        panel("Allocated memory per GPU card (share)", "timeseries",
              [(memory, "{{node}} gpu {{minor}}")], 12, 13, 12, 8, unit="percentunit"),
        panel("Containers per device", "timeseries",
              [(f'devshare_device_containers{{{NODE}}}', "{{node}} {{type}} {{minor}}")], 0, 21, 12, 8,
              description="Containers holding a share of each device (a pod of two containers on one card counts "
                          "two)."),
        panel("Stranded GPUs per node", "timeseries",
              [(f'devshare_node_stranded_gpus{{{NODE}}}', "{{node}}"),
               (f"sum(devshare_node_stranded_gpus{{{NODE}}})", "selected nodes")], 12, 21, 12, 8),
        row("GPU quotas of the selected namespaces ($namespace)", 29),
        panel("GPU compute: allocated and quota per namespace (GPUs)", "timeseries",
              [(f"devshare_namespace_gpu_allocated{{{NAMESPACE}}}", "{{namespace}} allocated"),
               (f"devshare_namespace_gpu_quota{{{NAMESPACE}}}", "{{namespace}} quota")], 0, 30, 12, 8,
              description="GPU compute the pods of each namespace hold (every dialect, in GPUs) against its "
                          "quota (quotas.<namespace>.gpuCore of the configuration, docs/configuration.md)."),
        panel("GPU memory: allocated and quota per namespace", "timeseries",
              [(f"devshare_namespace_gpu_memory_allocated_bytes{{{NAMESPACE}}}", "{{namespace}} allocated"),
               (f"devshare_namespace_gpu_memory_quota_bytes{{{NAMESPACE}}}", "{{namespace}} quota")],
              12, 30, 12, 8, unit="bytes"),
        row("GPU use measured by the node agents ($node, $namespace)", 38),
        panel("GPU memory: used (node agents) and allocated per namespace", "timeseries",
              [(f"sum by (namespace) ({used})", "{{namespace}} used"),
               (f"devshare_namespace_gpu_memory_allocated_bytes{{{NAMESPACE}}}", "{{namespace}} allocated")],
              0, 39, 12, 8, unit="bytes",
              description="What the containers of each namespace really use (NVML, read by the node agent of the "
                          "selected nodes) beside what devshare allocated them: a namespace far below its "
                          "allocation asks for more than it needs."),
        panel("GPU utilization per container", "timeseries",
              [(f"avg by (namespace, pod, container) ({util})", "{{namespace}}/{{pod}}/{{container}}")],
              12, 39, 12, 8, unit="percentunit",
              description="The busy share of the cards each container uses (NVML, node agent), averaged over its "
                          "cards."),
        panel("GPU memory used per container", "timeseries",
              [(f"sum by (namespace, pod, container) ({used})", "{{namespace}}/{{pod}}/{{container}}")],
              0, 47, 24, 8, unit="bytes"),
        row("The extender (all nodes: requests and decisions)", 55),
        panel("Pods holding devices", "stat", [("sum by (phase) (devshare_extender_pods)", "{{phase}}")],
              0, 56, 6, 4),
        panel("Binds refused (5m)", "stat",
              [('sum(increase(devshare_extender_requests_total{verb="bind", result="error"}[5m]))', "refused")],
              6, 56, 6, 4),
        panel("Synced / leader", "stat", [("max(devshare_extender_synced)", "synced"),
                                          ("max(devshare_extender_leader)", "leader")], 12, 56, 12, 4),
        panel("Filter latency", "timeseries", quantiles("filter"), 0, 60, 8, 8, unit="s"),
        panel("Prioritize latency", "timeseries", quantiles("prioritize"), 8, 60, 8, 8, unit="s"),
        panel("Bind latency", "timeseries", quantiles("bind"), 16, 60, 8, 8, unit="s"),
        panel("Binds refused, by reason", "timeseries",
              [('sum by (reason) (rate(devshare_extender_failures_total{verb="bind"}[$__rate_interval]))',
                "{{reason}}")], 0, 68, 8, 8, unit="ops"),
        panel("Nodes refused by filter, by reason", "timeseries",
              [('sum by (reason) (rate(devshare_extender_failures_total{verb="filter"}[$__rate_interval]))',
                "{{reason}}")], 8, 68, 8, 8, unit="ops"),
        panel("Requests, by verb and result", "timeseries",
              [("sum by (verb, result) (rate(devshare_extender_requests_total[$__rate_interval]))",
                "{{verb}} {{result}}")], 16, 68, 8, 8, unit="reqps"),
    ]
    for i, p in enumerate(panels, start=1):
        p["id"] = i
    return {
        "title": "devshare: GPU sharing",
        "uid": "devshare-gpu-sharing",
        "description": "devshare: GPU allocation per node and card, containers per device, stranded GPUs, "
                       "namespace quotas, GPU use measured by the node agents, extender latency and refusals.",
        "tags": ["devshare", "gpu", "kubernetes"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 2,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            {"name": "node", "type": "query", "datasource": DS, "label": "node", "includeAll": True, "multi": True,
             "allValue": ".*", "refresh": 2, "query": {"query": "label_values(devshare_device_containers, node)",
                                                       "refId": "node"},
             "definition": "label_values(devshare_device_containers, node)"},
            {"name": "namespace", "type": "query", "datasource": DS, "label": "namespace", "includeAll": True,
             "multi": True, "allValue": ".*", "refresh": 2,
             "query": {"query": "label_values(devshare_namespace_gpu_allocated, namespace)", "refId": "namespace"},
             "definition": "label_values(devshare_namespace_gpu_allocated, namespace)"},
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
