"""deploy/webhook/: the manifests say what the webhook needs, and agree with each other."""

from __future__ import annotations

from typing import Any

import yaml

from support import REPO

DEPLOY = REPO / "deploy" / "webhook"


def docs(name: str) -> dict[str, dict[str, Any]]:
    return {d["kind"] + "/" + d["metadata"]["name"]: d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d}


def test_webhook_configurations() -> None:
    hooks = docs("webhooks.yaml")
    service = docs("deployment.yaml")["Service/devshare-webhook"]
    for kind, path in (("MutatingWebhookConfiguration", "/mutate"), ("ValidatingWebhookConfiguration", "/validate")):
        hook = hooks[f"{kind}/devshare-webhook"]["webhooks"][0]
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["sideEffects"] == "None"
        assert hook["failurePolicy"] in ("Fail", "Ignore")
        assert 1 <= hook["timeoutSeconds"] <= 30
        assert len(hook["name"].split(".")) >= 3
        ref = hook["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"], ref["path"]) == (
            service["metadata"]["name"], service["metadata"]["namespace"], path)
        assert ref["port"] == service["spec"]["ports"][0]["port"]
        assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                  "resources": ["pods"], "scope": "Namespaced"}]
        (ns,) = hook["namespaceSelector"]["matchExpressions"]
        assert ns["operator"] == "NotIn" and {"kube-system", service["metadata"]["namespace"]} <= set(ns["values"])
        (opt_out,) = hook["objectSelector"]["matchExpressions"]
        assert opt_out == {"key": "devshare.io/webhook", "operator": "NotIn", "values": ["disabled"]}
        # issue 37: only pods asking for an extended resource (or a claim) are sent, in both
        (cond,) = hook["matchConditions"]
        assert cond["name"] == "asks-for-a-device"
        assert cond["expression"].count("k.contains('/')") == 4  # requests and limits of both container lists
        assert "has(object.spec.resourceClaims)" in cond["expression"]


def test_the_pod_webhooks_are_sent_every_pod_they_would_judge() -> None:
    """The matchCondition sends a pod asking for any name with a "/": a superset of the names the webhook
    judges (every dialect's, the kubernetes.io/ spellings it rewrites, a configured type's, a name under a
    dialect's prefix that no dialect defines): nothing it would refuse or rewrite skips it."""
    from devshare.model import dialects
    from devshare.model.dialects.koordinator_names import NAMES as KOORDINATOR_NAMES

    for name in (*dialects.resource_names(), *KOORDINATOR_NAMES, "koordinator.sh/gpu-cores", "example.com/npu"):
        assert "/" in name, name


def test_the_allocations_webhook_sees_every_pod_carrying_an_allocation_annotation() -> None:
    """No opt-out label, no namespace left out; its matchConditions name exactly the annotations of
    devshare.model.dialects.allocation_annotations (the one list), and it is sent CREATE and UPDATE."""
    import re

    from devshare.model import dialects

    service = docs("deployment.yaml")["Service/devshare-webhook"]
    validate = docs("webhooks.yaml")["ValidatingWebhookConfiguration/devshare-webhook"]["webhooks"]
    hook = next(h for h in validate if h["name"] == "allocations.webhook.devshare.io")
    assert hook["failurePolicy"] == "Fail"
    assert hook["rules"] == [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    assert "objectSelector" not in hook and "namespaceSelector" not in hook
    assert hook["clientConfig"]["service"]["path"] == "/validate"
    assert hook["clientConfig"]["service"]["name"] == service["metadata"]["name"]
    (cond,) = hook["matchConditions"]
    for listed in re.findall(r"k in \[([^\]]*)\]", cond["expression"]):
        assert {x.strip().strip("'") for x in listed.split(",")} == set(dialects.allocation_annotations())
    for prefix in dialects.allocation_prefixes():
        assert cond["expression"].count(f"k.startsWith('{prefix}')") == 2


DEFAULT_SCHEDULER = "system:kube-scheduler"  # the default kube-scheduler's user (its client certificate's CN)


def test_the_bindings_webhook_sees_every_binding_but_devshares() -> None:
    """Seed 001's upgrade webhook: Binding CREATEs (pods/binding and the older bindings resource) go to
    /validate-binding, except those of the identities the webhook lets write allocations (its default
    --allocation-writer list), which matchConditions leave out; the webhook may read pods."""
    from devshare.server.webhook.allocations import DEFAULT_WRITERS

    d = docs("deployment.yaml")
    service = d["Service/devshare-webhook"]
    validate = docs("webhooks.yaml")["ValidatingWebhookConfiguration/devshare-webhook"]["webhooks"]
    hook = next(h for h in validate if h["name"] == "bindings.webhook.devshare.io")
    assert hook["failurePolicy"] == "Fail"
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods/binding", "bindings"], "scope": "Namespaced"}]
    assert "objectSelector" not in hook
    (ns,) = hook["namespaceSelector"]["matchExpressions"]
    assert ns["operator"] == "NotIn" and {"kube-system", service["metadata"]["namespace"]} <= set(ns["values"])
    assert hook["clientConfig"]["service"]["path"] == "/validate-binding"
    assert hook["clientConfig"]["service"]["name"] == service["metadata"]["name"]
    (cond,) = hook["matchConditions"]
    listed = cond["expression"].split("[", 1)[1].split("]", 1)[0]
    assert {x.strip().strip("'") for x in listed.split(",")} == {*DEFAULT_WRITERS, DEFAULT_SCHEDULER}
    assert cond["expression"].startswith("!(request.userInfo.username in [")
    # the default scheduler's Bindings: the same check, Ignore when the webhook does not answer (issue 37)
    default = next(h for h in validate if h["name"] == "default-scheduler-bindings.webhook.devshare.io")
    assert default["failurePolicy"] == "Ignore"
    assert {k: v for k, v in default.items() if k not in ("name", "failurePolicy", "matchConditions")} == {
        k: v for k, v in hook.items() if k not in ("name", "failurePolicy", "matchConditions")}
    (cond,) = default["matchConditions"]
    assert cond["expression"].strip() == f"request.userInfo.username == '{DEFAULT_SCHEDULER}'"
    rules = d["ClusterRole/devshare-webhook"]["rules"]
    # get: a Binding's pod; list: a trade's partner
    assert {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]} in rules


def test_deployment_serves_what_the_service_targets() -> None:
    d = docs("deployment.yaml")
    deployment = d["Deployment/devshare-webhook"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[0] == "webhook"
    port = int(next(a.split("=", 1)[1] for a in args if a.startswith("--port=")))
    assert container["ports"][0]["containerPort"] == port
    assert d["Service/devshare-webhook"]["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]
    mount = container["volumeMounts"][0]["mountPath"]
    assert f"--tls-cert={mount}/tls.crt" in args and f"--tls-key={mount}/tls.key" in args
    secret = deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"]
    # cert-manager writes the Secret the Deployment mounts, for the Service's DNS names
    cert = docs("cert-manager.yaml")["Certificate/devshare-webhook"]["spec"]
    assert cert["secretName"] == secret
    assert "devshare-webhook.devshare-system.svc" in cert["dnsNames"]
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert container[probe]["httpGet"]["path"] == path
        assert container[probe]["httpGet"]["scheme"] == "HTTPS"


def test_kustomization_and_no_namespace_of_its_own() -> None:
    kust = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert kust["resources"] == ["deployment.yaml"]
    # the namespace is deploy/scheduler's: deleting the webhook must not delete it
    for name in ("deployment.yaml", "webhooks.yaml", "cert-manager.yaml"):
        assert not [k for k in docs(name) if k.startswith("Namespace/")], name
