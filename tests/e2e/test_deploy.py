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
