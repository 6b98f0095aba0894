"""The uninstall that docs/deploy.md documents, run on a control plane of its own: afterwards
nothing of devshare blocks pod creation (the webhook configurations have failurePolicy Fail for device
pods, so one left behind, with its webhook gone, would refuse every device pod in every selected
namespace; pods asking for no device are never sent)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from e2e.cluster import DEPLOY, REPO, ControlPlane, control_plane


def documented_uninstall() -> list[list[str]]:
    text = (REPO / "docs" / "deploy.md").read_text()
    section = text.split("## Uninstall", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "docs/deploy.md: the Uninstall section has no sh block"
    lines = [ln.split("#", 1)[0].strip() for ln in block.group(1).splitlines()]
    return [shlex.split(ln)[1:] for ln in lines if ln.startswith("kubectl ")]


def _register_webhooks(cp: ControlPlane) -> None:
    cp.kubectl("apply", "-f", str(DEPLOY / "webhook" / "deployment.yaml"))
    cp.apply(cp.webhook_configurations("https://127.0.0.1:1"))  # no webhook listens there


def test_documented_uninstall_leaves_pod_creation_working(tmp_path: Path) -> None:
    with control_plane(tmp_path) as cp:
        cp.install()
        _register_webhooks(cp)  # the webhook itself is not running: device pods are refused now
        cp.namespace("after")
        # (a pod asking for no device is never sent to the webhook: issue 37; one asking for a device is)
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "after"},
               "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                        "resources": {"limits": {"koordinator.sh/gpu-core": "50",
                                                                 "koordinator.sh/gpu-memory-ratio": "50"}}}]}}
        plain = {**pod, "metadata": {"name": "plain", "namespace": "after"},
                 "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
        assert cp.kubectl("create", "-f", "-", input=json.dumps(plain), check=False).returncode == 0
        refused = cp.kubectl("create", "-f", "-", input=json.dumps(pod), check=False)
        assert refused.returncode != 0 and "webhook" in refused.stderr

        for args in documented_uninstall():
            if args[0] == "delete":  # no namespace controller runs here to finish a namespace's deletion
                args = [*args, "--wait=false"]
            out = cp.kubectl(*args, check=False, timeout=180)
            assert out.returncode == 0 or "NotFound" in out.stderr, f"kubectl {' '.join(args)}: {out.stderr}"

        assert cp.kubectl("get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "name"
                          ).stdout.strip() == ""
        cp.namespace("after")
        created = cp.kubectl("create", "-f", "-", input=json.dumps(pod), check=False)
        assert created.returncode == 0, created.stderr
