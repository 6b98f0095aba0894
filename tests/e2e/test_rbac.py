"""Issue 37, item 7, on the real API server: each identity of deploy/ may do what docs/deploy.md ("What
each component may do") lists and nothing more. The extender's ServiceAccount (shared with
kube-scheduler) is checked by SelfSubjectAccessReview verb by verb, and the policy that pins what it may
change on a pod (deploy/scheduler/pod-writes.yaml) with real patches; the agent may not change a pod's
spec on its own node. The rest of the e2e suite is the proof that the extender still works."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2e.cluster import SYSTEM_NS
from e2e.conftest import Cluster
from e2e.test_agent import _patch

GPU = {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}


def can(cluster: Cluster, who: Path, verb: str, resource: str, *, namespace: str | None = None,
        name: str = "") -> bool:
    resource, _, sub = resource.partition("/")
    args = ["auth", "can-i", verb, resource + (f"/{name}" if name else "")] + ([f"--subresource={sub}"] if sub else [])
    args += ["-n", namespace] if namespace else ["--all-namespaces"]
    out = cluster.cp.kubectl(*args, as_=who, check=False)
    assert out.stdout.strip() in ("yes", "no"), out.stdout + out.stderr
    return out.stdout.strip() == "yes"


@pytest.mark.parametrize(("verb", "resource", "namespace", "name", "allowed"), [
    # what the extender calls (and kube-scheduler, beside it)
    ("list", "pods", None, "", True), ("watch", "pods", None, "", True), ("get", "pods", "team-x", "", True),
    ("patch", "pods", "team-x", "", True), ("delete", "pods", "team-x", "", True),
    ("create", "pods/binding", "team-x", "", True), ("create", "events", "team-x", "", True),
    ("list", "devices.devshare.io", None, "", True), ("watch", "devices.devshare.io", None, "", True),
    ("list", "nodes", None, "", True),
    # patch nodes: the steering taint (issue 41); node-writes.yaml pins it to that one taint
    ("patch", "nodes", None, "", True),
    ("get", "configmaps", SYSTEM_NS, "devshare-claims", True),
    ("update", "configmaps", SYSTEM_NS, "devshare-claims", True),
    ("create", "configmaps", SYSTEM_NS, "", True),
    ("update", "leases.coordination.k8s.io", SYSTEM_NS, "devshare-scheduler", True),
    # beyond its need: refused
    # update pods: deploy/dra's, to lift DRA's scheduling gate (a PUT with the pod's resourceVersion);
    # pod-writes.yaml pins what any write of this identity may change on a pod, PUT or PATCH
    ("update", "pods", "team-x", "", True),
    ("create", "pods", "team-x", "", False),
    ("create", "pods/eviction", "team-x", "", False),
    ("update", "nodes", None, "", False), ("delete", "nodes", None, "", False),
    ("update", "devices.devshare.io", None, "", False), ("delete", "devices.devshare.io", None, "", False),
    ("get", "secrets", SYSTEM_NS, "", False), ("list", "secrets", None, "", False),
    ("get", "configmaps", SYSTEM_NS, "devshare-config", False),
    ("delete", "configmaps", SYSTEM_NS, "devshare-claims", False),
    ("update", "configmaps", "team-x", "devshare-claims", False),
    ("update", "leases.coordination.k8s.io", "kube-system", "kube-controller-manager", False),
    ("create", "deployments.apps", SYSTEM_NS, "", False),
])
def test_the_scheduler_identity_may_do_what_it_needs_only(cluster: Cluster, verb: str, resource: str,
                                                           namespace: str | None, name: str, allowed: bool) -> None:
    who = cluster.cp.token_kubeconfig("devshare-scheduler")
    assert can(cluster, who, verb, resource, namespace=namespace, name=name) is allowed


def test_the_extender_may_patch_only_its_own_annotations(cluster: Cluster) -> None:
    """RBAC lets it patch pods; the policy devshare-scheduler-pod-writes lets it change only
    devshare.io/claim-expired and devshare.io/devices-freed-at (and lift devshare's DRA gate)."""
    cp = cluster.cp
    node = cluster.node("rbac-pin", gpus=1)
    cluster.pod("placed", GPU)
    cluster.wait_bound("placed", timeout=60)
    who = cp.token_kubeconfig("devshare-scheduler")
    ns = ["-n", cluster.ns]

    def patch(body: object, kind: str = "merge") -> str:
        out = cp.kubectl("patch", "pod", "placed", *ns, f"--type={kind}", "-p", json.dumps(body), as_=who, check=False)
        return "" if out.returncode == 0 else out.stderr

    assert patch({"metadata": {"annotations": {"devshare.io/claim-expired": "2026-11-28T00:00:00Z"}}}) == ""
    assert patch({"metadata": {"annotations": {"devshare.io/devices-freed-at": "1"}}}) == ""
    assert patch({"metadata": {"annotations": {"devshare.io/devices-freed-at": None}}}) == ""
    policy = "ValidatingAdmissionPolicy 'devshare-scheduler-pod-writes'"
    for body in ({"metadata": {"labels": {"tier": "gold"}}},
                 {"metadata": {"annotations": {"note": "x"}}},
                 {"metadata": {"annotations": {"devshare.io/allocation": "{}"}}},
                 {"metadata": {"finalizers": ["example.com/hold"]}}):
        err = patch(body)
        assert policy in err and "may only set devshare.io/claim-expired, devshare.io/devices-freed-at" in err, body
    image = [{"op": "replace", "path": "/spec/containers/0/image", "value": "registry.example.com/other:1"}]
    err = patch(image, "json")
    assert policy in err and "may change nothing of pod placed's spec" in err, err
    toleration = [{"op": "add", "path": "/spec/tolerations/-", "value": {"key": "x", "operator": "Exists"}}]
    assert policy in patch(toleration, "json")
    pod = cluster.get_pod("placed")
    assert pod["spec"]["containers"][0]["image"] == "registry.k8s.io/pause:3.10"
    assert "tier" not in (pod["metadata"].get("labels") or {}) and pod["spec"]["nodeName"] == node
    # the admin is not concerned by the policy
    cp.kubectl("label", "pod", "placed", *ns, "tier=gold")


def test_the_agent_may_not_change_a_pod_spec_on_its_node(cluster: Cluster) -> None:
    """Issue 37: the agent's policy checked labels and annotations only, so an agent could change the
    images of pods on its node."""
    cp = cluster.cp
    node = cluster.node("rbac-agent", gpus=1)
    cluster.pod("mine", GPU)
    cluster.wait_bound("mine", timeout=60)
    agent = cp.token_kubeconfig("devshare-agent", on_node=node)
    # one merge PATCH, as the agent sends it (kubectl would GET first, which the agent may not): the
    # containers as they are, but the image
    containers = cluster.get_pod("mine")["spec"]["containers"]
    containers[0]["image"] = "registry.example.com/x:1"
    out = _patch(agent, f"/api/v1/namespaces/{cluster.ns}/pods/mine", json.dumps({"spec": {"containers": containers}}))
    assert out.returncode != 0
    assert "ValidatingAdmissionPolicy 'devshare-agent-own-node'" in out.stderr
    assert "nothing else (spec, labels, finalizers, owners) of pod mine" in out.stderr, out.stderr
    assert cluster.get_pod("mine")["spec"]["containers"][0]["image"] == "registry.k8s.io/pause:3.10"
    assigned = json.dumps({"metadata": {"annotations": {"devshare.io/assigned": "true"}}})
    assert _patch(agent, f"/api/v1/namespaces/{cluster.ns}/pods/mine", assigned).returncode == 0
