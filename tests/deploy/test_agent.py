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
    assert rules == {("", "nodes/status"): {"patch"}, ("", "pods"): {"list", "patch"},
                     ("devshare.io", "devices"): {"get", "create", "update"}}
    ds = docs[("DaemonSet", "devshare-agent")]["spec"]["template"]["spec"]
    assert ds["serviceAccountName"] == "devshare-agent"
    assert ds["nodeSelector"]
    mounts = {m["mountPath"] for m in ds["containers"][0]["volumeMounts"]}
    assert "/var/lib/kubelet/device-plugins" in mounts
    assert {v["hostPath"]["path"] for v in ds["volumes"] if "hostPath" in v} == {"/var/lib/kubelet/device-plugins"}
    assert ds["containers"][0]["command"] == ["devshare", "agent", "run"]
