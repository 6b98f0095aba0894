"""The Helm chart installed on a real API server with the README's exact command (issues 37 and 40),
then uninstalled as documented; and what a webhook outage does, on that install.

No kubelet runs here, so no Deployment gets pods: the webhook "replica" is a devshare webhook process run
as the chart's Deployment runs it, on the certificate the chart made (read from its Secret), reached by
the API server through the chart's Service (kube-apiserver --enable-aggregator-routing: a Service is
resolved to its EndpointSlice, which the test writes as the endpoints controller would). Then it is
killed, and docs/deploy.md's table ("When the webhook is down") is checked row by row: a pod asking for
no device is created and bound by the default kube-scheduler (a real one, as system:kube-scheduler); a
GPU pod's creation is refused; a GPU pod created before is bound by devshare; another binder is refused.
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

from e2e.cluster import (
    DEVSHARE,
    REPO,
    SCHEDULER_NAME,
    ControlPlane,
    ControlPlaneError,
    control_plane,
    free_port,
    wait_until,
)
from e2e.conftest import Cluster

CHART = REPO / "deploy" / "helm" / "devshare"
NS = "devshare-system"
GPU = {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}


def readme_install() -> str:
    """The README's helm one-liner, as pasted."""
    m = re.search(r"<!-- helm-install[^>]*-->\n\s*```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert m, "README.md lost its <!-- helm-install --> block"
    return m.group(1).strip()


def host_ip() -> str:
    """This machine's address on its default route (an EndpointSlice may not name a loopback one)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # sends nothing: picks the route's source address
            ip = str(s.getsockname()[0])
    except OSError as e:
        raise ControlPlaneError(f"the webhook outage test needs a non-loopback IPv4 address: {e}") from None
    if ip.startswith(("127.", "169.254.")):
        raise ControlPlaneError(f"the webhook outage test needs a non-loopback IPv4 address, found {ip}")
    return ip


class Helm:
    def __init__(self, cp: ControlPlane, tmp: Path) -> None:
        homes = {f"HELM_{k}_HOME": str(tmp / f"helm-{k.lower()}") for k in ("CACHE", "CONFIG", "DATA")}
        self.env = {**os.environ, **homes, "KUBECONFIG": str(cp.admin),
                    "PATH": f"{cp.bin}{os.pathsep}{os.environ.get('PATH', '')}"}

    def sh(self, command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-euo", "pipefail", "-c", command], capture_output=True, text=True,
                              timeout=300, cwd=REPO, env=self.env)


def secret_files(cp: ControlPlane, tmp: Path) -> dict[str, Path]:
    data = cp.get("secret", "devshare-webhook-tls", "-n", NS)["data"]
    out = {}
    for k in ("tls.crt", "tls.key", "ca.crt"):
        out[k] = tmp / k
        out[k].write_bytes(base64.b64decode(data[k]))
    return out


def start_webhook_replica(cp: ControlPlane, tmp: Path, ip: str) -> Any:
    """The chart's webhook Deployment's container, run here: its args, the chart's Secret and ConfigMap."""
    tls = secret_files(cp, tmp)
    config = tmp / "devshare-config.yaml"
    config.write_text(cp.get("configmap", "devshare-config", "-n", NS)["data"]["devshare-config.yaml"])
    deployment = cp.get("deployment", "devshare-webhook", "-n", NS)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = [a for a in container["args"] if not a.startswith(("--tls-cert=", "--tls-key=", "--port=", "--in-cluster",
                                                               "--config="))]
    port = free_port()
    proc = cp.spawn("chart-webhook", [*DEVSHARE, *args, f"--tls-cert={tls['tls.crt']}", f"--tls-key={tls['tls.key']}",
                                      f"--port={port}", "--host", ip, f"--config={config}",
                                      "--kubeconfig", str(cp.token_kubeconfig("devshare-webhook", NS))],
                    env={**os.environ, "PYTHONUNBUFFERED": "1"})
    # what the endpoints controller would write for a ready replica behind the chart's Service
    cp.apply({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
              "metadata": {"name": "devshare-webhook-replica", "namespace": NS,
                           "labels": {"kubernetes.io/service-name": "devshare-webhook"}},
              "addressType": "IPv4",
              "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
              "ports": [{"name": "https", "port": port, "protocol": "TCP"}]})
    return proc, tls, port


def test_readme_install_a_webhook_outage_and_uninstall(tmp_path: Path) -> None:
    ip = host_ip()
    with control_plane(tmp_path, api_args=("--enable-aggregator-routing=true",)) as cp:
        helm = Helm(cp, tmp_path)
        command = readme_install()
        assert command.startswith("helm install devshare deploy/helm/devshare -n devshare-system --create-namespace")
        out = helm.sh(command)
        assert out.returncode == 0, out.stderr
        for kind, name in (("deployment", "devshare-scheduler"), ("deployment", "devshare-webhook"),
                           ("daemonset", "devshare-agent"), ("configmap", "devshare-config"),
                           ("configmap", "devshare-scheduler-config"), ("service", "devshare-webhook"),
                           ("secret", "devshare-webhook-tls")):
            assert cp.kubectl("get", kind, name, "-n", NS, "-o", "name").stdout.strip(), (kind, name)
        assert cp.kubectl("get", "crd", "devices.devshare.io", "-o", "name").stdout.strip()
        for policy in ("devshare-agent-own-node", "devshare-scheduler-pod-writes"):
            assert cp.kubectl("get", "validatingadmissionpolicy", policy, "-o", "name").stdout.strip()
        ca = cp.get("secret", "devshare-webhook-tls", "-n", NS)["data"]["ca.crt"]
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            hooks = cp.get(kind, "devshare-webhook")["webhooks"]
            assert {h["clientConfig"]["caBundle"] for h in hooks} == {ca}  # the chart's own CA
        image = cp.get("deployment", "devshare-webhook", "-n", NS)["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image.startswith("registry.example.com/devshare:")  # --set image.repository, as documented

        # devshare's scheduler (the chart's ServiceAccount and RBAC) and the default kube-scheduler
        cp.start_extender()
        cp.start_scheduler()
        default_scheduler = cp.cert_kubeconfig("system:kube-scheduler")
        cp.spawn("default-scheduler", [str(cp.bin / "kube-scheduler"), f"--kubeconfig={default_scheduler}",
                                       "--leader-elect=false", "--bind-address=127.0.0.1",
                                       f"--secure-port={free_port()}", f"--cert-dir={tmp_path / 'default-certs'}",
                                       f"--authentication-kubeconfig={cp.admin}",
                                       f"--authorization-kubeconfig={cp.admin}", "--v=2"])
        cluster = Cluster(cp, "outage")

        # a webhook replica answers: the chart's certificate is trusted, its Service reaches it
        webhook, tls, port = start_webhook_replica(cp, tmp_path, ip)
        bad = cluster.pod("bad", {"vke.volcengine.com/mgpu-core": "100"}, create=False,
                          annotations={"vke.volcengine.com/container-multiple-gpu": "3"})

        def refused_by_the_webhook() -> bool:
            out = cp.kubectl("create", "-f", "-", input=json.dumps(bad), check=False)
            assert out.returncode != 0, "an invalid mGPU pod was created"
            return 'admission webhook "validate.webhook.devshare.io" denied the request' in out.stderr

        wait_until(refused_by_the_webhook, timeout=60, interval=1, what="the chart's webhook to answer")
        # the helm test's check of the webhook, run here: TLS to the Service's name, the chart's CA
        env = {**os.environ, "NAMESPACE": NS, "CHECK_WEBHOOK": "1", "WEBHOOK_CA": str(tls["ca.crt"]),
               "WEBHOOK_ADDRESS": f"{ip}:{port}"}
        check = subprocess.run(["python3", str(CHART / "files" / "helm-test.py")], capture_output=True, text=True,
                               env=env, timeout=60)
        assert check.returncode == 0 and check.stdout.startswith("ok: webhook:"), check.stdout + check.stderr
        # a GPU pod created now waits for a GPU node
        cluster.pod("waiting", GPU)

        # every webhook replica killed
        webhook.signal(signal.SIGKILL)
        wait_until(lambda: not webhook.alive, timeout=30, what="the webhook replica gone")
        check = subprocess.run(["python3", str(CHART / "files" / "helm-test.py")], capture_output=True, text=True,
                               env=env, timeout=60)
        assert check.returncode == 1 and check.stdout.startswith("FAILED: webhook:"), check.stdout

        # a pod asking for no device: created, and bound by the default scheduler
        cluster.pod("plain", {"cpu": "10m"}, scheduler=None, node_selector=False)
        cluster.node("outage-gpu", gpus=1)
        plain = cluster.wait_bound("plain", timeout=90)
        assert plain["spec"]["schedulerName"] == "default-scheduler"
        # a GPU pod cannot be created until a replica answers (its controller would retry)
        out = cp.kubectl("create", "-f", "-", input=json.dumps(cluster.pod("gpu-late", GPU, create=False)), check=False)
        assert out.returncode != 0 and 'failed calling webhook "mutate.webhook.devshare.io"' in out.stderr, out.stderr
        # the GPU pod created before is bound by devshare: its own Bindings never wait on the webhook
        waiting = cluster.wait_bound("waiting", timeout=90)
        assert waiting["spec"]["schedulerName"] == SCHEDULER_NAME
        assert "devshare.io/allocation" in waiting["metadata"]["annotations"]
        # anyone else's Binding (another scheduler's, a person's) is refused while no replica answers
        cluster.pod("theirs", {"cpu": "10m"}, scheduler="volcano", node_selector=False)
        binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "theirs", "namespace": cluster.ns},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": "outage-gpu"}}
        out = cp.kubectl("create", "--raw", f"/api/v1/namespaces/{cluster.ns}/pods/theirs/binding", "-f", "-",
                         input=json.dumps(binding), check=False)
        assert out.returncode != 0 and 'failed calling webhook "bindings.webhook.devshare.io"' in out.stderr

        # the documented uninstall: the webhook configurations first, then the release
        cp.kubectl("delete", "mutatingwebhookconfiguration,validatingwebhookconfiguration", "devshare-webhook")
        out = helm.sh(f"helm uninstall devshare -n {NS} --wait=false")
        assert out.returncode == 0, out.stderr
        assert cp.kubectl("get", "mutatingwebhookconfigurations,validatingwebhookconfigurations", "-o", "name"
                          ).stdout.strip() == ""
        assert cp.kubectl("get", "clusterrole", "devshare-extender", check=False).returncode != 0
        assert cp.kubectl("get", "validatingadmissionpolicy", "devshare-scheduler-pod-writes",
                          check=False).returncode != 0
