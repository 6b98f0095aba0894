"""deploy/helm/devshare: linted, rendered, and equivalent to the kustomize folders.

helm is looked for in $DEVSHARE_HELM, $DEVSHARE_E2E_BIN, on PATH, then in the folder
tests/e2e/build-binaries.sh builds into ($DEVSHARE_E2E_CACHE or ~/.cache/devshare-e2e, */bin/helm);
without it the rendering tests skip and say so (tests/e2e/test_helm.py installs the chart on the real
API server with the e2e suite's own helm). The kustomize side is read here directly (resources and
configMapGenerator, all these folders use), so no kustomize binary is needed.
"""

from __future__ import annotations

import base64
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
# the version deploy/ runs kube-scheduler at: the chart's default kube-scheduler image follows the
# cluster's version, so the chart and deploy/ render the same image at it
KUBE_VERSION = ("--kube-version", "v1.37.2")
# the oldest Kubernetes the chart installs on (Chart.yaml's kubeVersion), and what makes it so: the
# release each API (or field) the chart renders became GA, and on by default
MINIMUM = "1.30"
SERVED_SINCE = {
    ("v1", "ServiceAccount"): "1.0", ("v1", "ConfigMap"): "1.0", ("v1", "Service"): "1.0", ("v1", "Secret"): "1.0",
    ("v1", "Pod"): "1.0",
    ("apps/v1", "Deployment"): "1.9", ("apps/v1", "DaemonSet"): "1.9",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "1.8",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "1.8",
    ("rbac.authorization.k8s.io/v1", "Role"): "1.8", ("rbac.authorization.k8s.io/v1", "RoleBinding"): "1.8",
    ("policy/v1", "PodDisruptionBudget"): "1.21",
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"): "1.16",
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"): "1.16",
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"): "1.16",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"): "1.30",
    ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"): "1.30",
    # optional: installed only with their operators' CRDs (serviceMonitor.enabled, webhook.certManager.enabled)
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "",
    ("cert-manager.io/v1", "Issuer"): "", ("cert-manager.io/v1", "Certificate"): "",
}
FIELDS_SINCE = {
    "matchConditions of admission webhooks (AdmissionWebhookMatchConditions)": "1.30",
    "the node in a pod-bound ServiceAccount token's extra (ServiceAccountTokenPodNodeInfo, on by default)": "1.30",
    "kubescheduler.config.k8s.io/v1 with profile-level percentageOfNodesToScore": "1.27",
}
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


def render(*sets: str, kube_version: tuple[str, ...] = KUBE_VERSION, hooks: bool = False) -> list[dict[str, Any]]:
    """The chart's objects (``hooks``: with `helm test`'s, which `helm install` does not create)."""
    args = ["template", "devshare", str(CHART), "--namespace", NAMESPACE, "--include-crds", *kube_version]
    for s in sets:
        args += ["--set", s]
    r = helm(*args)
    assert r.returncode == 0, r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    return [d for d in docs if hooks or "helm.sh/hook" not in (d["metadata"].get("annotations") or {})]


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
    objs = (kustomize(ROOT / "deploy/scheduler") + kustomize(ROOT / "deploy/dra") + kustomize(ROOT / "deploy/webhook")
            + kustomize(ROOT / "deploy/agent"))
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
    """deploy/'s folders, DRA's included (deploy/dra), are the chart with dra.enabled."""
    chart = {key(o): normalise(o) for o in render("webhook.caBundle=Q0E=", "dra.enabled=true")}
    assert f"Secret/{NAMESPACE}/devshare-webhook-tls" not in chart  # with caBundle alone the Secret is the operator's
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


def _pem_of(tmp: Path, name: str, b64: str) -> Path:
    path = tmp / name
    path.write_bytes(base64.b64decode(b64))
    return path


@needs_helm
def test_the_chart_makes_its_own_certificate(tmp_path: Path) -> None:
    """Issue 37: the README's one-liner set only caBundle, and the webhook mounted a Secret nobody made.
    With nothing given, the chart makes a CA and a serving certificate for the webhook's Service, the
    Secret holds both, and both webhook configurations trust that CA."""
    objs = {key(o): o for o in render()}
    secret = objs[f"Secret/{NAMESPACE}/devshare-webhook-tls"]
    assert secret["type"] == "kubernetes.io/tls" and set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for hook in objs[f"{kind}//devshare-webhook"]["webhooks"]:
            assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"], (kind, hook["name"])
    ca = _pem_of(tmp_path, "ca.crt", secret["data"]["ca.crt"])
    crt = _pem_of(tmp_path, "tls.crt", secret["data"]["tls.crt"])
    key_file = _pem_of(tmp_path, "tls.key", secret["data"]["tls.key"])
    ok = subprocess.run(["openssl", "verify", "-CAfile", str(ca), "-verify_hostname",
                         f"devshare-webhook.{NAMESPACE}.svc", str(crt)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    pub = [subprocess.run(["openssl", *args], capture_output=True, text=True).stdout for args in (
        ("x509", "-in", str(crt), "-noout", "-pubkey"), ("pkey", "-in", str(key_file), "-pubout"))]
    assert pub[0] and pub[0] == pub[1]  # the key is the certificate's
    # one certificate per rendering: the Secret and both configurations agree (checked above); the next
    # rendering (no cluster to read it back from) makes another
    assert render()[0] is not None


@needs_helm
def test_certificates_given_or_from_cert_manager() -> None:
    kinds = {o["kind"] for o in render("webhook.caBundle=Q0E=")}
    assert "Secret" not in kinds and "ValidatingWebhookConfiguration" in kinds  # the operator's own Secret
    objs = {key(o): o for o in render("webhook.certManager.enabled=true")}
    hook = objs["MutatingWebhookConfiguration//devshare-webhook"]
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/devshare-webhook"
    assert "caBundle" not in hook["webhooks"][0]["clientConfig"]
    assert f"Certificate/{NAMESPACE}/devshare-webhook" in objs
    assert "Secret" not in {o["kind"] for o in objs.values()}
    tls = {key(o): o for o in render("webhook.tls.cert=CERT", "webhook.tls.key=KEY", "webhook.caBundle=Q0E=")}
    data = tls[f"Secret/{NAMESPACE}/devshare-webhook-tls"]["data"]
    assert data == {"tls.crt": "Q0VSVA==", "tls.key": "S0VZ", "ca.crt": "Q0E="}
    # a certificate without its CA: the Secret, but no webhook configuration that could not be trusted
    kinds = {o["kind"] for o in render("webhook.tls.cert=CERT", "webhook.tls.key=KEY")}
    assert "Secret" in kinds and "ValidatingWebhookConfiguration" not in kinds


@needs_helm
def test_webhooks_send_only_what_concerns_devices() -> None:
    """Issue 37: every pod CREATE and every Binding went to the webhook with failurePolicy Fail. The pod
    webhooks now send only pods asking for an extended resource or a claim; the default scheduler's
    Bindings fail open; the rest stays Fail."""
    objs = {key(o): o for o in render()}
    hooks = {h["name"]: h for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
             for h in objs[f"{kind}//devshare-webhook"]["webhooks"]}
    assert set(hooks) == {"mutate.webhook.devshare.io", "validate.webhook.devshare.io",
                          "allocations.webhook.devshare.io", "bindings.webhook.devshare.io",
                          "default-scheduler-bindings.webhook.devshare.io"}
    for name, hook in hooks.items():
        assert hook["matchConditions"], name
        assert hook["failurePolicy"] == ("Ignore" if name.startswith("default-scheduler") else "Fail"), name
    for name in ("mutate.webhook.devshare.io", "validate.webhook.devshare.io"):
        (cond,) = hooks[name]["matchConditions"]
        assert cond["name"] == "asks-for-a-device" and "k.contains('/')" in cond["expression"]
    objs = {key(o): o for o in render("webhook.failurePolicy=Ignore")}
    validating = objs["ValidatingWebhookConfiguration//devshare-webhook"]["webhooks"]
    assert {h["failurePolicy"] for h in validating} == {"Ignore"}


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
    # issue 37: the extender's read-only port defaults to 127.0.0.1, which Prometheus in another pod cannot
    # reach: the chart says every address of the pod, explicitly
    assert args[args.index("--metrics-host") + 1] == "0.0.0.0"
    plain = next(o for o in render() if key(o) == f"Deployment/{NAMESPACE}/devshare-scheduler")
    plain_extender = next(c for c in plain["spec"]["template"]["spec"]["containers"] if c["name"] == "extender")
    assert "--metrics-host" not in plain_extender["args"]  # no read-only port: no address for it


@needs_helm
def test_pod_monitor_scrapes_the_agents_usage_metrics() -> None:
    """Issue 40: nothing scraped the node agents' per-container usage (port 9402) that the dashboard charts."""
    assert not [o for o in render() if o["kind"] == "PodMonitor"]  # off by default: it needs the operator's CRDs
    objs = {key(o): o for o in render("podMonitor.enabled=true", "podMonitor.labels.release=prom",
                                      "podMonitor.interval=15s")}
    monitor = objs[f"PodMonitor/{NAMESPACE}/devshare-agent"]
    assert monitor["metadata"]["labels"]["release"] == "prom"
    agent = objs[f"DaemonSet/{NAMESPACE}/devshare-agent"]["spec"]["template"]
    assert all(agent["metadata"]["labels"][k] == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint == {"port": "metrics", "path": "/metrics", "interval": "15s"}
    [container] = agent["spec"]["containers"]
    assert {"name": "metrics", "containerPort": 9402} in container["ports"]
    assert "--metrics-port=9402" in container["args"]
    assert not [o for o in render("podMonitor.enabled=true", "agent.enabled=false") if o["kind"] == "PodMonitor"]


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


def _make_schema() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_values_schema", ROOT / "deploy/helm/make_values_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.schema()


def test_values_schema_is_generated_and_holds_the_configuration_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema == _make_schema()  # python deploy/helm/make_values_schema.py writes it
    assert schema["properties"]["config"] == {"$ref": "#/$defs/Configuration"}
    configuration = msgspec.json.schema(Configuration)["$defs"]
    assert {k: schema["$defs"][k] for k in configuration} == configuration


def test_values_schema_describes_every_value() -> None:
    """Every key of values.yaml is in the schema, and every object of the schema refuses unknown keys."""
    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(values: Any, node: dict[str, Any], where: str) -> None:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]] if "$ref" in node else node
        if not isinstance(values, dict) or "properties" not in node:
            return
        assert node.get("additionalProperties") is False, where
        for k, v in values.items():
            assert k in node["properties"], f"{where}.{k} is not in values.schema.json"
            walk(v, node["properties"][k], f"{where}.{k}")

    walk(yaml.safe_load((CHART / "values.yaml").read_text()), schema, "values")


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


# --- issue 40: a chart that renders and installs with plain commands ------------------------------

def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


@needs_helm
def test_plain_helm_template_renders() -> None:
    """`helm template devshare deploy/helm/devshare -n devshare-system`, as written in docs/deploy.md: no
    --kube-version (a release helm assumes its own Kubernetes, tests/e2e/build-binaries.sh builds it so)."""
    r = helm("template", "devshare", str(CHART), "-n", NAMESPACE)
    assert r.returncode == 0, r.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(r.stdout) if d}
    assert {"Deployment", "DaemonSet", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy"} <= kinds


@needs_helm
def test_the_minimum_kubernetes_version_is_one_and_checked() -> None:
    """One minimum, the oldest release serving everything the chart renders (every option on), said the
    same in Chart.yaml, README.md and docs/deploy.md; rendered at it, refused below it."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={MINIMUM}.0-0"
    everything = render("serviceMonitor.enabled=true", "webhook.certManager.enabled=true",
                        "grafanaDashboard.enabled=true", kube_version=("--kube-version", f"v{MINIMUM}.0"), hooks=True)
    needed = []
    for obj in everything:
        since = SERVED_SINCE.get((obj["apiVersion"], obj["kind"]))
        assert since is not None, f"{obj['apiVersion']} {obj['kind']}: add the release it became GA to SERVED_SINCE"
        if since:
            needed.append(since)
    needed += FIELDS_SINCE.values()
    assert max(needed, key=_version) == MINIMUM
    r = helm("template", "devshare", str(CHART), "-n", NAMESPACE, "--kube-version", "v1.29.15")
    assert r.returncode != 0 and f">={MINIMUM}.0-0" in r.stderr
    for doc in ("README.md", "docs/deploy.md"):
        text = (ROOT / doc).read_text()
        assert f"Kubernetes {MINIMUM} or later" in text, doc
        assert "v1.25+" not in text and "1.32+" not in text and "1.28+" not in text, doc


@needs_helm
def test_the_scheduler_image_follows_the_cluster() -> None:
    def image(*args: str, kube: str) -> str:
        objs = {key(o): o for o in render(*args, kube_version=("--kube-version", kube))}
        spec = objs[f"Deployment/{NAMESPACE}/devshare-scheduler"]["spec"]["template"]["spec"]
        return str(next(c["image"] for c in spec["containers"] if c["name"] == "kube-scheduler"))

    assert image(kube="v1.30.4") == "registry.k8s.io/kube-scheduler:v1.30.4"
    assert image(kube="v1.31.2-eks-7f9249a") == "registry.k8s.io/kube-scheduler:v1.31.2"  # a managed cluster's
    assert image("scheduler.image=my.registry/kube-scheduler:v1.31.0", kube="v1.31.2") == \
        "my.registry/kube-scheduler:v1.31.0"


@needs_helm
@pytest.mark.parametrize("bad", [
    "scheduler.toleration[0].key=a",        # a misspelt key
    "scheduler.tolerations[0].efect=NoSchedule",
    "webhook.replica=3",
    "nosuch=1",
    "logLevel=loud",
    "image.pullPolicy=Sometimes",
    "agent.tolerations[0].operator=Maybe",
])
def test_unknown_or_wrong_values_are_refused(bad: str) -> None:
    """Issue 40: `--set scheduler.tolerations[0].key=a` was accepted and silently dropped."""
    r = helm("template", "devshare", str(CHART), "-n", NAMESPACE, "--set", bad)
    assert r.returncode != 0, bad
    assert "values don't meet the specifications of the schema" in r.stderr, r.stderr


@needs_helm
def test_every_component_takes_the_usual_values() -> None:
    sets: list[str] = ["imagePullSecrets[0].name=regcred", "logLevel=debug"]
    for c in ("scheduler", "webhook", "agent"):
        sets += [f"{c}.tolerations[0].key=a", f"{c}.tolerations[0].operator=Exists",
                 f"{c}.nodeSelector.pool=gpu", f"{c}.priorityClassName=high",
                 f"{c}.podAnnotations.note=x", f"{c}.podLabels.team=ml", f"{c}.resources.limits.memory=3Gi",
                 f"{c}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                 f".nodeSelectorTerms[0].matchExpressions[0].key=zone",
                 f"{c}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                 f".nodeSelectorTerms[0].matchExpressions[0].operator=Exists"]
    sets.append("scheduler.kubeSchedulerResources.limits.cpu=2")
    objs = {key(o): o for o in render(*sets)}
    for kind, name, container in (("Deployment", "devshare-scheduler", "extender"),
                                  ("Deployment", "devshare-webhook", "webhook"),
                                  ("DaemonSet", "devshare-agent", "agent")):
        template = objs[f"{kind}/{NAMESPACE}/{name}"]["spec"]["template"]
        spec = template["spec"]
        assert spec["tolerations"] == [{"key": "a", "operator": "Exists"}], name
        assert spec["nodeSelector"]["pool"] == "gpu", name  # merged into the agent's default
        assert spec["priorityClassName"] == "high", name
        assert spec["imagePullSecrets"] == [{"name": "regcred"}], name
        assert spec["affinity"]["nodeAffinity"], name
        assert template["metadata"]["annotations"]["note"] == "x", name
        assert template["metadata"]["labels"]["team"] == "ml", name
        assert template["metadata"]["labels"]["app.kubernetes.io/name"] == name  # the selector's label stays
        (c,) = [c for c in spec["containers"] if c["name"] == container]
        assert c["resources"]["limits"]["memory"] == "3Gi", name
        assert "--log-level=debug" in [*c.get("args", []), *c.get("command", [])], name
    sched = objs[f"Deployment/{NAMESPACE}/devshare-scheduler"]["spec"]["template"]["spec"]["containers"]
    assert next(c for c in sched if c["name"] == "kube-scheduler")["resources"]["limits"]["cpu"] == 2
    # the defaults: deploy/'s (test_chart_renders_what_kustomize_builds), no --log-level at info
    objs = {key(o): o for o in render()}
    agent = objs[f"DaemonSet/{NAMESPACE}/devshare-agent"]["spec"]["template"]["spec"]["containers"][0]
    assert not [a for a in agent["args"] if a.startswith("--log-level")]


@needs_helm
def test_helm_test_checks_every_component() -> None:
    objs = {key(o): o for o in render(hooks=True)}
    pod = objs[f"Pod/{NAMESPACE}/devshare-test"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["CHECK_SCHEDULER"] == env["CHECK_WEBHOOK"] == env["CHECK_AGENT"] == "1"
    script = objs[f"ConfigMap/{NAMESPACE}/devshare-test"]["data"]["helm-test.py"]
    assert script == (CHART / "files" / "helm-test.py").read_text().rstrip("\n")
    for name in ("ServiceAccount/devshare-system/devshare-test", "ClusterRole//devshare-test"):
        assert objs[name]["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert not [k for k in (key(o) for o in render()) if "devshare-test" in k]  # not installed by helm install


@needs_helm
def test_dra_is_off_by_default_and_needs_kubernetes_1_34() -> None:
    """The chart's default install works from its minimum Kubernetes: no DeviceClass, and the extender and
    the webhook told so (--no-dra); dra.enabled on a cluster older than 1.34 is refused with the reason."""
    objs = render()
    assert not [o for o in objs if o["kind"] == "DeviceClass"]
    deployments = {o["metadata"]["name"]: o for o in objs if o["kind"] == "Deployment"}
    for name, container in (("devshare-scheduler", "extender"), ("devshare-webhook", "webhook")):
        (c,) = [c for c in deployments[name]["spec"]["template"]["spec"]["containers"] if c["name"] == container]
        assert "--no-dra" in c["args"], (name, c["args"])
    assert [o for o in render("dra.enabled=true") if o["kind"] == "DeviceClass"]
    r = helm("template", "devshare", str(CHART), "--namespace", NAMESPACE, "--kube-version", "v1.33.0",
             "--set", "dra.enabled=true")
    assert r.returncode != 0 and "dra.enabled needs Kubernetes 1.34" in r.stderr, r.stderr
