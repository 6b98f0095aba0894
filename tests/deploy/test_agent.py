"""deploy/agent: the manifests parse, and the ClusterRole grants exactly what the agent uses."""

from __future__ import annotations

import yaml

from support import REPO

DEPLOY = REPO / "deploy" / "agent"


def test_manifests() -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d for f in ("rbac.yaml", "daemonset.yaml")
            for d in yaml.safe_load_all((DEPLOY / f).read_text())}
    role = docs[("ClusterRole", "devshare-agent")]
    rules = {(g, r): set(rule["verbs"]) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    assert rules == {("", "nodes"): {"patch"}, ("", "nodes/status"): {"patch"}, ("", "pods"): {"list", "patch"},
                     ("devshare.io", "devices"): {"get", "create", "update"}, ("", "events"): {"create"},
                     # DRA (agent run --dra): the node's ResourceSlice, the claims it prepares
                     ("resource.k8s.io", "resourceslices"): {"get", "create", "update"},
                     ("resource.k8s.io", "resourceclaims"): {"get"}}
    ds = docs[("DaemonSet", "devshare-agent")]["spec"]["template"]["spec"]
    assert ds["serviceAccountName"] == "devshare-agent"
    assert ds["nodeSelector"]
    mounts = {m["mountPath"] for m in ds["containers"][0]["volumeMounts"]}
    assert "/var/lib/kubelet/device-plugins" in mounts
    assert {v["hostPath"]["path"] for v in ds["volumes"] if "hostPath" in v} == {"/var/lib/kubelet/device-plugins",
                                                                                 "/var/lib/devshare"}
    assert "/var/lib/devshare" in mounts
    assert "--agent-checkpoint=/var/lib/devshare/agent-checkpoint.json" in ds["containers"][0]["args"]
    # kubelet's checkpoint, where the mount puts it (issue 39: it may appear after the agent starts)
    assert "--checkpoint=/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint" in ds["containers"][0]["args"]
    # per-container GPU usage: host PIDs (NVML's) and their cgroups, served on the metrics port
    assert ds["hostPID"] is True
    assert "--metrics-port=9402" in ds["containers"][0]["args"]
    assert ds["containers"][0]["ports"] == [{"name": "metrics", "containerPort": 9402}]
    assert ds["containers"][0]["command"] == ["devshare", "agent", "run"]


def test_every_write_the_agent_may_make_is_restricted_to_its_own_node() -> None:
    """node-restriction.yaml: the ValidatingAdmissionPolicy matches the agent's ServiceAccount, covers
    every resource its ClusterRole lets it write, is bound with Deny, and is installed by kustomize."""
    docs = {(d["kind"], d["metadata"]["name"]): d for f in ("rbac.yaml", "node-restriction.yaml")
            for d in yaml.safe_load_all((DEPLOY / f).read_text())}
    sa = docs[("ServiceAccount", "devshare-agent")]["metadata"]
    policy = docs[("ValidatingAdmissionPolicy", "devshare-agent-own-node")]["spec"]
    (cond,) = policy["matchConditions"]
    assert cond["expression"] == f"request.userInfo.username == 'system:serviceaccount:{sa['namespace']}:{sa['name']}'"
    covered = {(g, r) for rule in policy["matchConstraints"]["resourceRules"] for g in rule["apiGroups"]
               for r in rule["resources"]}
    writes = {(g, r) for rule in docs[("ClusterRole", "devshare-agent")]["rules"] for g in rule["apiGroups"]
              for r in rule["resources"] if set(rule["verbs"]) - {"get", "list", "watch"}}
    assert writes <= covered
    assert policy["failurePolicy"] == "Fail"
    assert "authentication.kubernetes.io/node-name" in policy["variables"][0]["expression"]
    binding = docs[("ValidatingAdmissionPolicyBinding", "devshare-agent-own-node")]["spec"]
    assert binding == {"policyName": "devshare-agent-own-node", "validationActions": ["Deny"]}
    assert "node-restriction.yaml" in yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]


def test_the_policy_lists_what_a_trade_exchanges_and_the_gpu_labels() -> None:
    """The CEL lists are devshare's own: the keys a trade exchanges (devshare.model.trade) and the
    GPU labels the agent owns (devshare.model.names)."""
    import ast

    from devshare.model import names, trade

    docs = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "node-restriction.yaml").read_text())}
    variables = {v["name"]: v["expression"] for v in docs["ValidatingAdmissionPolicy"]["spec"]["variables"]}
    assert set(ast.literal_eval(variables["traded"])) == trade.traded_keys()
    assert tuple(ast.literal_eval(variables["tradedPrefixes"])) == trade.traded_prefixes()
    assert set(ast.literal_eval(variables["marks"])) == set(trade.MARKS)
    assert tuple(ast.literal_eval(variables["gpuLabels"])) == names.GPU_NODE_LABELS
    assert names.TRADE in variables["trading"]
