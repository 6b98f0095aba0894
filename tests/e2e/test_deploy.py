"""Every deploy/ folder applies to the real API server (server-side validation, the CRD schema),
and the documented uninstall leaves nothing that blocks pod creation."""

from __future__ import annotations

import json

from e2e.cluster import DEPLOY, ControlPlane


def test_every_deploy_folder_applies_server_side(cp: ControlPlane) -> None:
    for folder in ("scheduler", "agent"):
        out = cp.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server", "-k", str(DEPLOY / folder))
        assert out.returncode == 0
    out = cp.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server",
                     "-f", str(DEPLOY / "webhook" / "deployment.yaml"))
    assert out.returncode == 0


def test_device_schema_refuses_a_device_without_minor(cp: ControlPlane) -> None:
    bad = {"apiVersion": "devshare.io/v1alpha1", "kind": "Device", "metadata": {"name": "bad-device"},
           "spec": {"devices": [{"type": "gpu", "id": "GPU-x"}]}}
    out = cp.kubectl("create", "-f", "-", input=json.dumps(bad), check=False)
    assert out.returncode != 0 and "minor" in out.stderr


def test_scheduler_pod_is_admitted_under_pod_security_restricted(cp: ControlPlane) -> None:
    """The scheduler Deployment's pod, created in a namespace that enforces the "restricted" Pod
    Security profile (the API server's PodSecurity admission), is admitted without a warning."""
    import yaml

    docs = [d for d in yaml.safe_load_all((DEPLOY / "scheduler" / "deployment.yaml").read_text()) if d]
    template = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]
    cp.apply({"apiVersion": "v1", "kind": "Namespace",
              "metadata": {"name": "e2e-restricted", "labels": {"pod-security.kubernetes.io/enforce": "restricted",
                                                                "pod-security.kubernetes.io/warn": "restricted"}}})
    cp.apply({"apiVersion": "v1", "kind": "ServiceAccount",
              "metadata": {"name": "devshare-scheduler", "namespace": "e2e-restricted"}})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "scheduler", "namespace": "e2e-restricted"},
           "spec": {**template["spec"], "priorityClassName": None}}
    del pod["spec"]["priorityClassName"]  # system-cluster-critical is quota-limited to kube-system by default
    out = cp.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
    assert out.returncode == 0, out.stderr
    assert "PodSecurity" not in out.stderr and "would violate" not in out.stderr, out.stderr
    limits = {c["name"]: c["resources"].get("limits", {}) for c in template["spec"]["containers"]}
    assert all("memory" in lim for lim in limits.values()), limits
