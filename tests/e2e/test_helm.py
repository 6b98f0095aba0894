"""The Helm chart installed on a real API server by helm itself (server-side validation of every
object, the CRD from crds/), then uninstalled; the webhook configurations are only installed when a
CA is given, and nothing that blocks pod creation is left behind."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

from e2e.cluster import REPO, control_plane

CHART = REPO / "deploy" / "helm" / "devshare"
NS = "devshare-system"


def test_helm_install_and_uninstall(tmp_path: Path) -> None:
    with control_plane(tmp_path) as cp:
        helm_bin = str(cp.bin / "helm")

        def helm(*args: str) -> str:
            homes = {f"HELM_{k}_HOME": str(tmp_path / f"helm-{k.lower()}") for k in ("CACHE", "CONFIG", "DATA")}
            out = subprocess.run([helm_bin, "--kubeconfig", str(cp.admin), *args], capture_output=True, text=True,
                                 timeout=300, cwd=REPO, env={**os.environ, **homes})
            assert out.returncode == 0, f"helm {' '.join(args)}: {out.stderr}"
            return out.stdout

        ca = base64.b64encode((cp.pki / "ca.crt").read_bytes()).decode()
        helm("install", "devshare", str(CHART), "-n", NS, "--create-namespace", "--set", f"webhook.caBundle={ca}")
        assert cp.kubectl("get", "crd", "devices.devshare.io", "-o", "name").stdout.strip()
        for kind, name in (("deployment", "devshare-scheduler"), ("deployment", "devshare-webhook"),
                           ("daemonset", "devshare-agent"), ("configmap", "devshare-config"),
                           ("configmap", "devshare-scheduler-config"), ("service", "devshare-webhook")):
            assert cp.kubectl("get", kind, name, "-n", NS, "-o", "name").stdout.strip(), (kind, name)
        hooks = cp.kubectl("get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "json")
        assert len(json.loads(hooks.stdout)["items"]) == 2
        config = json.loads(cp.kubectl("get", "configmap", "devshare-config", "-n", NS, "-o", "json").stdout)
        assert "kind: DevshareConfiguration" in config["data"]["devshare-config.yaml"]

        # the documented order: webhook configurations first, then the release
        cp.kubectl("delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "devshare-webhook")
        helm("uninstall", "devshare", "-n", NS, "--wait=false")
        assert cp.kubectl("get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "name"
                          ).stdout.strip() == ""
        assert cp.kubectl("get", "clusterrole", "devshare-extender", check=False).returncode != 0
