"""deploy/helm/devshare: linted, rendered, and equivalent to the kustomize folders.

helm is looked for in $DEVSHARE_HELM, $DEVSHARE_E2E_BIN, on PATH, then in the folder
tests/e2e/build-binaries.sh builds into ($DEVSHARE_E2E_CACHE or ~/.cache/devshare-e2e, */bin/helm);
without it the rendering tests skip and say so (tests/e2e/test_helm.py installs the chart on the real
API server with the e2e suite's own helm). The kustomize side is read here directly (resources and
configMapGenerator, all these folders use), so no kustomize binary is needed.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from devshare.config import Configuration, load_config, parse_config
from support import REPO

ROOT = REPO
CHART = ROOT / "deploy" / "helm" / "devshare"
SHIPPED = ROOT / "deploy" / "scheduler" / "config" / "devshare-config.yaml"
NAMESPACE = "devshare-system"
# helm built from its Go module without the release ldflags assumes Kubernetes v1.20: name a version
KUBE_VERSION = ("--kube-version", "v1.31.0")
# the chart labels every object with these; some kustomize objects carry part-of, some nothing
HELM_LABELS = ("app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "helm.sh/chart",
               "app.kubernetes.io/part-of")


def find_helm() -> str | None:
    if os.environ.get("DEVSHARE_HELM"):
        return os.environ["DEVSHARE_HELM"]
    e2e_bin = os.environ.get("DEVSHARE_E2E_BIN")  # binaries built elsewhere, as the e2e suite takes them
    if e2e_bin and (Path(e2e_bin) / "helm").is_file():
        return str(Path(e2e_bin) / "helm")
    on_path = shutil.which("helm")
    if on_path:
        return on_path
    cache = Path(os.environ.get("DEVSHARE_E2E_CACHE", Path.home() / ".cache" / "devshare-e2e"))
    built = sorted(cache.glob("*/bin/helm"))
    return str(built[-1]) if built else None


HELM = find_helm()
needs_helm = pytest.mark.skipif(
    HELM is None, reason="no helm binary: set DEVSHARE_HELM, put helm on PATH, or run tests/e2e/build-binaries.sh")


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    homes = {f"HELM_{k}_HOME": f"/tmp/devshare-helm-{k.lower()}" for k in ("CACHE", "CONFIG", "DATA")}
    return subprocess.run([HELM, *args], capture_output=True, text=True, timeout=300, env={**os.environ, **homes})


def render(*sets: str) -> list[dict[str, Any]]:
    args = ["template", "devshare", str(CHART), "--namespace", NAMESPACE, "--include-crds", *KUBE_VERSION]
    for s in sets:
        args += ["--set", s]
    r = helm(*args)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def kustomize(folder: Path) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize folder` builds, for the features these folders use."""
    kust = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert set(kust) <= {"apiVersion", "kind", "resources", "configMapGenerator", "generatorOptions"}, kust
    objs: list[dict[str, Any]] = []
    for res in kust.get("resources", []):
        objs += [d for d in yaml.safe_load_all((folder / res).read_text()) if d]
    for gen in kust.get("configMapGenerator", []):
        assert kust.get("generatorOptions", {}).get("disableNameSuffixHash") is True
        data = {Path(f).name: (folder / f).read_text() for f in gen["files"]}
        objs.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": gen["name"], "namespace": gen["namespace"]}, "data": data})
    return objs


def key(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def normalise(obj: dict[str, Any]) -> dict[str, Any]:
    """What both renderings must agree on: Helm's own labels, the config checksum, imagePullPolicy and
    the webhook's caBundle placeholder left out; embedded YAML files compared as data."""
    o = copy.deepcopy(obj)
    labels = o["metadata"].pop("labels", None) or {}
    o["metadata"]["labels"] = {k: v for k, v in labels.items() if k not in HELM_LABELS} or None
    if o["metadata"]["labels"] is None:
        del o["metadata"]["labels"]
    template = o.get("spec", {}).get("template", {})
    notes = template.get("metadata", {}).get("annotations", {})
    for k in [k for k in notes if k.startswith("checksum/")]:
        del notes[k]
    if "annotations" in template.get("metadata", {}) and not notes:
        del template["metadata"]["annotations"]
    for c in template.get("spec", {}).get("containers", []):
        c.pop("imagePullPolicy", None)
    for hook in o.get("webhooks", []):
        hook["clientConfig"].pop("caBundle", None)
    if o["kind"] == "ConfigMap":
        o["data"] = {k: yaml.safe_load(v) if k.endswith(".yaml") else v for k, v in o["data"].items()}
    return o


def kustomize_objects() -> dict[str, dict[str, Any]]:
    objs = kustomize(ROOT / "deploy/scheduler") + kustomize(ROOT / "deploy/webhook") + kustomize(ROOT / "deploy/agent")
    objs += [d for d in yaml.safe_load_all((ROOT / "deploy/webhook/webhooks.yaml").read_text()) if d]
    # the chart does not make its release namespace (helm install --create-namespace)
    return {key(o): normalise(o) for o in objs if o["kind"] != "Namespace"}


@needs_helm
def test_chart_lints() -> None:
    r = helm("lint", str(CHART), "--strict", *KUBE_VERSION, "--namespace", NAMESPACE, "--set", "webhook.caBundle=Q0E=")
    assert r.returncode == 0, r.stdout + r.stderr
    r = helm("lint", str(CHART), "--strict", *KUBE_VERSION, "--set", "serviceMonitor.enabled=true",
             "--set", "webhook.certManager.enabled=true")
    assert r.returncode == 0, r.stdout + r.stderr


@needs_helm
def test_chart_renders_what_kustomize_builds() -> None:
    chart = {key(o): normalise(o) for o in render("webhook.caBundle=Q0E=")}
    kust = kustomize_objects()
    assert sorted(chart) == sorted(kust)
    for k, obj in kust.items():
        assert chart[k] == obj, k


@needs_helm
def test_helm_labels_on_every_object() -> None:
    for obj in render("webhook.caBundle=Q0E="):
        if obj["kind"] == "CustomResourceDefinition":
            continue  # crds/ are installed as written
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "devshare", key(obj)
        assert labels["app.kubernetes.io/managed-by"] == "Helm", key(obj)


@needs_helm
def test_webhook_configurations_need_a_ca() -> None:
    kinds = {o["kind"] for o in render()}
    assert "MutatingWebhookConfiguration" not in kinds and "ValidatingWebhookConfiguration" not in kinds
    assert "Deployment" in kinds
    objs = {key(o): o for o in render("webhook.certManager.enabled=true")}
    hook = objs["MutatingWebhookConfiguration//devshare-webhook"]
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/devshare-webhook"
    assert "caBundle" not in hook["webhooks"][0]["clientConfig"]
    assert f"Certificate/{NAMESPACE}/devshare-webhook" in objs
    assert "Secret" not in {o["kind"] for o in objs.values()}
    tls = {key(o): o for o in render("webhook.tls.cert=CERT", "webhook.tls.key=KEY")}
    assert tls[f"Secret/{NAMESPACE}/devshare-webhook-tls"]["data"] == {"tls.crt": "Q0VSVA==", "tls.key": "S0VZ"}


@needs_helm
def test_service_monitor_scrapes_the_read_only_listener() -> None:
    objs = {key(o): o for o in render("serviceMonitor.enabled=true", "serviceMonitor.labels.release=prom")}
    monitor = objs[f"ServiceMonitor/{NAMESPACE}/devshare-scheduler"]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    service = objs[f"Service/{NAMESPACE}/devshare-scheduler-metrics"]
    assert all(service["metadata"]["labels"][k] == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    deployment = objs[f"Deployment/{NAMESPACE}/devshare-scheduler"]
    extender = next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender")
    args = extender["args"]
    assert args[args.index("--metrics-port") + 1] == "9888"
    assert args[args.index("--host") + 1] == "127.0.0.1"  # the extender API itself stays local
    assert {"name": "metrics", "containerPort": 9888} in extender["ports"]


@needs_helm
def test_config_values_become_the_configmap_and_are_validated() -> None:
    objs = {key(o): o for o in render("config.scheduling.coreWeight=20", "config.deviceTypes.fpga=false")}
    text = objs[f"ConfigMap/{NAMESPACE}/devshare-config"]["data"]["devshare-config.yaml"]
    cfg = parse_config(yaml.safe_load(text))
    assert cfg.scheduling.core_weight == 20 and cfg.device_types.disabled() == {"fpga"}
    # values.schema.json is devshare.config's schema: helm refuses what the extender would refuse
    for bad in ("config.scheduling.coreWeight=120", "config.scheduling.coreWeigth=20",
                "config.scheduling.nodePolicy=fast"):
        r = helm("template", "devshare", str(CHART), *KUBE_VERSION, "--set", bad)
        assert r.returncode != 0 and "config" in r.stderr, (bad, r.stderr)


@needs_helm
def test_a_configured_device_type_is_routed_to_the_extender() -> None:
    """config.deviceTypes.<type>.resources are also ignored by kube-scheduler's resource fit (the
    extender judges them)."""
    objs = {key(o): o for o in render("config.deviceTypes.npu.resources={koordinator.sh/npu,example.com/npu}")}
    cfg = parse_config(yaml.safe_load(objs[f"ConfigMap/{NAMESPACE}/devshare-config"]["data"]["devshare-config.yaml"]))
    assert cfg.device_types.configured() == {"npu": ("koordinator.sh/npu", "example.com/npu")}
    sched = yaml.safe_load(objs[f"ConfigMap/{NAMESPACE}/devshare-scheduler-config"]["data"]["scheduler-config.yaml"])
    (fit,) = [p["args"] for p in sched["profiles"][0]["pluginConfig"] if p["name"] == "NodeResourcesFit"]
    assert fit["ignoredResources"][-2:] == ["koordinator.sh/npu", "example.com/npu"]


def test_default_values_are_the_default_configuration() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert parse_config({"apiVersion": "devshare.io/v1alpha1", "kind": "DevshareConfiguration",
                         **values["config"]}) == load_config(SHIPPED)  # deploy/'s file: shortlist on


def test_values_schema_is_the_configuration_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["config"] == {"$ref": "#/$defs/Configuration"}
    # regenerate with: see this test; msgspec.json.schema(Configuration)["$defs"]
    assert schema["$defs"] == msgspec.json.schema(Configuration)["$defs"]


def test_crd_is_the_kustomize_one() -> None:
    assert (CHART / "crds" / "device.yaml").read_text() == (ROOT / "deploy/scheduler/crd-device.yaml").read_text()


@needs_helm
def test_components_can_be_left_out() -> None:
    keys = {key(o) for o in render("scheduler.enabled=false", "agent.enabled=false")}
    assert f"Deployment/{NAMESPACE}/devshare-scheduler" not in keys
    assert f"DaemonSet/{NAMESPACE}/devshare-agent" not in keys
    assert f"Deployment/{NAMESPACE}/devshare-webhook" in keys
    assert f"ConfigMap/{NAMESPACE}/devshare-config" in keys  # the webhook mounts it
    keys = {key(o) for o in render("webhook.enabled=false", "webhook.caBundle=Q0E=")}
    assert not [k for k in keys if "webhook" in k.lower()]


def test_chart_ships_the_dashboard() -> None:
    shipped = CHART / "files" / "devshare-dashboard.json"
    assert shipped.read_text() == (ROOT / "deploy" / "grafana" / "devshare-dashboard.json").read_text()


@needs_helm
def test_grafana_dashboard_configmap() -> None:
    assert "devshare-grafana-dashboard" not in {o["metadata"]["name"] for o in render()}
    objs = {key(o): o for o in render("grafanaDashboard.enabled=true", "grafanaDashboard.namespace=monitoring")}
    cm = objs["ConfigMap/monitoring/devshare-grafana-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["devshare-dashboard.json"]) == json.loads(
        (ROOT / "deploy" / "grafana" / "devshare-dashboard.json").read_text())


@needs_helm
def test_devshares_identities_follow_the_release_namespace() -> None:
    """In another namespace the webhook is told devshare's ServiceAccounts there (--allocation-writer: the
    extender; --allocation-trader: the node agent), and the bindings webhook's matchConditions leave the
    writer out: only it writes allocations and binds device pods."""
    r = helm("template", "devshare", str(CHART), "--namespace", "gpu-sched", *KUBE_VERSION,
             "--set", "webhook.caBundle=Q0E=")
    assert r.returncode == 0, r.stderr
    objs = {key(o): o for o in yaml.safe_load_all(r.stdout) if o}
    (container,) = objs["Deployment/gpu-sched/devshare-webhook"]["spec"]["template"]["spec"]["containers"]
    writers = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--allocation-writer=")]
    traders = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--allocation-trader=")]
    assert writers == ["system:serviceaccount:gpu-sched:devshare-scheduler"]
    assert traders == ["system:serviceaccount:gpu-sched:devshare-agent"]
    hooks = objs["ValidatingWebhookConfiguration//devshare-webhook"]["webhooks"]
    (binding,) = [h for h in hooks if h["name"] == "bindings.webhook.devshare.io"]
    assert all(w in binding["matchConditions"][0]["expression"] for w in writers)
    assert not any(w in binding["matchConditions"][0]["expression"] for w in traders)
    assert binding["clientConfig"]["service"]["path"] == "/validate-binding"
    default = {key(o): o for o in render()}
    (container,) = default[f"Deployment/{NAMESPACE}/devshare-webhook"]["spec"]["template"]["spec"]["containers"]
    assert not [a for a in container["args"] if a.startswith("--allocation-writer")]  # the webhook's defaults


@needs_helm
def test_the_window_of_candidate_nodes_is_a_value() -> None:
    """scheduler.percentageOfNodesToScore goes into the devshare-scheduler profile; 0 (the default)
    leaves kube-scheduler's adaptive window, as deploy/ does."""
    def profile(*sets: str) -> dict[str, Any]:
        objs = {key(o): o for o in render(*sets)}
        cfg = yaml.safe_load(objs[f"ConfigMap/{NAMESPACE}/devshare-scheduler-config"]["data"]["scheduler-config.yaml"])
        (p,) = cfg["profiles"]
        return dict(p)

    assert "percentageOfNodesToScore" not in profile()
    assert profile("scheduler.percentageOfNodesToScore=1")["percentageOfNodesToScore"] == 1
