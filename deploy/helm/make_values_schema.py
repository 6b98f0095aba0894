"""Writes deploy/helm/devshare/values.schema.json (run: python deploy/helm/make_values_schema.py).

Every value of values.yaml is described, and every object refuses keys it does not know
(additionalProperties: false), so `helm install --set scheduler.tolerations[0].key=a` is read and a
misspelt key (`--set scheduler.toleration[0].key=a`) is refused rather than silently dropped.
`config:` is devshare's DevshareConfiguration: its schema is generated from devshare.config, so helm
refuses a configuration the extender would refuse. tests/deploy/test_helm.py checks the file is what
this writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from devshare.config import Configuration

OUT = Path(__file__).resolve().parent / "devshare" / "values.schema.json"


def obj(props: dict[str, Any], description: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "additionalProperties": False, "properties": props}
    if description:
        out["description"] = description
    return out


def string(description: str = "", **kw: Any) -> dict[str, Any]:
    return {"type": "string", **({"description": description} if description else {}), **kw}


STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
QUANTITY = {"anyOf": [{"type": "string"}, {"type": "number"}]}
PORT = {"type": "integer", "minimum": 0, "maximum": 65535}
REF = "#/$defs/"

# shapes of the Kubernetes fields the chart passes through (the API server checks their insides)
KUBE_DEFS: dict[str, Any] = {
    "Resources": obj({"requests": {"type": "object", "additionalProperties": QUANTITY},
                      "limits": {"type": "object", "additionalProperties": QUANTITY},
                      "claims": {"type": "array", "items": {"type": "object"}}},
                     "a container's resources (requests, limits)"),
    "Toleration": obj({"key": {"type": "string"}, "operator": {"enum": ["Exists", "Equal"]},
                       "value": {"type": "string"},
                       "effect": {"enum": ["", "NoSchedule", "PreferNoSchedule", "NoExecute"]},
                       "tolerationSeconds": {"type": "integer"}}),
    "Affinity": obj({"nodeAffinity": {"type": "object"}, "podAffinity": {"type": "object"},
                     "podAntiAffinity": {"type": "object"}}),
    "LocalObjectReference": obj({"name": {"type": "string", "minLength": 1}}, "a Secret of the release namespace"),
}


def placement(priority: str) -> dict[str, Any]:
    """The values every component's pods take: where they run and what they carry."""
    return {
        "resources": {"$ref": REF + "Resources"},
        "nodeSelector": STRINGS,
        "tolerations": {"type": "array", "items": {"$ref": REF + "Toleration"}},
        "affinity": {"$ref": REF + "Affinity"},
        "priorityClassName": string(f"default {priority}; empty: none"),
        "podAnnotations": STRINGS,
        "podLabels": STRINGS,
    }


def schema() -> dict[str, Any]:
    config = msgspec.json.schema(Configuration)
    values = obj({
        "image": obj({"repository": string("the devshare image (docs/deploy.md, 'The image')", minLength=1),
                      "tag": string("default: the chart's appVersion"),
                      "pullPolicy": {"enum": ["Always", "IfNotPresent", "Never"]}}),
        "imagePullSecrets": {"type": "array", "items": {"$ref": REF + "LocalObjectReference"}},
        "logLevel": {"enum": ["debug", "info", "warning", "error"]},
        "scheduler": obj({
            "enabled": {"type": "boolean"},
            "replicas": {"type": "integer", "minimum": 0},
            "schedulerName": string(minLength=1),
            "image": string("kube-scheduler's image; empty: registry.k8s.io/kube-scheduler at the cluster's version"),
            "extenderWeight": {"type": "integer", "minimum": 1},
            "percentageOfNodesToScore": {"type": "integer", "minimum": 0, "maximum": 100},
            "extenderPort": {**PORT, "minimum": 1},
            "metricsPort": PORT,
            "metricsHost": string("address of the extender's read-only listener (--metrics-host)", minLength=1),
            "kubeSchedulerResources": {"$ref": REF + "Resources"},
            **placement("system-cluster-critical"),
        }),
        "config": {"$ref": REF + "Configuration"},
        "webhook": obj({
            "enabled": {"type": "boolean"},
            "replicas": {"type": "integer", "minimum": 0},
            "caBundle": string("base64 PEM of the CA; empty: the chart's own (or cert-manager's)"),
            "tls": obj({"cert": string("PEM"), "key": string("PEM")}),
            "certManager": obj({"enabled": {"type": "boolean"}}),
            "failurePolicy": {"enum": ["Fail", "Ignore"]},
            **placement("system-cluster-critical"),
        }),
        "agent": obj({"enabled": {"type": "boolean"}, **placement("system-node-critical")}),
        "test": obj({"resources": {"$ref": REF + "Resources"}}),
        "dra": obj({"enabled": {"type": "boolean"}},
                   "Dynamic Resource Allocation: devshare's DeviceClasses and its allocator (Kubernetes 1.34+)"),
        "serviceMonitor": obj({"enabled": {"type": "boolean"}, "interval": string(minLength=1),
                               "labels": STRINGS}),
        "podMonitor": obj({"enabled": {"type": "boolean"}, "interval": string(minLength=1), "labels": STRINGS},
                          "a PodMonitor for the node agents' metrics (port 9402)"),
        "grafanaDashboard": obj({"enabled": {"type": "boolean"}, "namespace": string(), "labels": STRINGS}),
    })
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "devshare chart values",
        "description": "Generated by deploy/helm/make_values_schema.py. config: is devshare's "
                       "DevshareConfiguration (docs/configuration.md), generated from devshare.config.",
        **values,
        "$defs": {**config["$defs"], **KUBE_DEFS},
    }


if __name__ == "__main__":
    OUT.write_text(json.dumps(schema(), indent=2) + "\n")
    print(f"wrote {OUT}")
