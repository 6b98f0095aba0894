"""``devshare webhook`` and ``devshare webhook cert``: one-line errors with exit 2, a certificate
that a client verifies, and the server started as a process answering over HTTPS."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from devshare.cli.main import app
from devshare.server.tls import ServingCert
from support.waiting import FAILSAFE
from support.webhook_client import Client
from support.webhook_pods import pod

runner = CliRunner()


def one_error_line(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: ")
    return lines[0]


def test_serving_needs_a_certificate() -> None:
    assert "--tls-cert and --tls-key are required" in one_error_line(["webhook"])


def test_missing_and_mismatched_files(tmp_path: Path, certs: ServingCert) -> None:
    assert "no such file" in one_error_line(["webhook", "--tls-cert", str(tmp_path / "x"), "--tls-key",
                                             str(certs.key)])
    assert "cannot use" in one_error_line(["webhook", "--tls-cert", str(certs.key), "--tls-key", str(certs.cert)])


def test_bad_options(tmp_path: Path, certs: ServingCert) -> None:
    tls = ["--tls-cert", str(certs.cert), "--tls-key", str(certs.key)]
    assert "--port" in one_error_line(["webhook", *tls, "--port", "70000"])
    assert "--log-level" in one_error_line(["webhook", *tls, "--log-level", "loud"])
    assert "unknown --event-loop 'trio'" in one_error_line(["webhook", *tls, "--event-loop", "trio"])
    (tmp_path / "c.yaml").write_text("kind: Device\nmetadata: [")
    assert "YAML" in one_error_line(["webhook", *tls, "--cluster", str(tmp_path / "c.yaml")])
    assert "no such file" in one_error_line(["webhook", *tls, "--cluster", str(tmp_path / "none.yaml")])


def test_cert_command(tmp_path: Path) -> None:
    result = runner.invoke(app, ["webhook", "cert", "--service", "devshare-webhook", "--namespace", "devshare-system",
                                 "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    bundle = result.stdout.strip()
    assert "\n" not in bundle
    pem = base64.b64decode(bundle).decode()
    assert pem.startswith("-----BEGIN CERTIFICATE-----")
    assert pem == (tmp_path / "out" / "ca.crt").read_text()
    for f in ("ca.crt", "ca.key", "tls.crt", "tls.key"):
        assert (tmp_path / "out" / f).is_file()
    assert "devshare-webhook.devshare-system.svc" in result.stderr


def test_cert_command_bad_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "not a valid Kubernetes name" in one_error_line(
        ["webhook", "cert", "--service", "Web_Hook", "--namespace", "ns", "--out", str(tmp_path)]
    )
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "openssl" in one_error_line(["webhook", "cert", "--service", "wh", "--namespace", "ns", "--out",
                                        str(tmp_path)])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_server_process(tmp_path: Path, certs: ServingCert) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(json.dumps({"apiVersion": "devshare.io/v1alpha1", "kind": "Device", "metadata": {"name": "n1"},
                                   "spec": {"devices": [{"type": "gpu", "minor": 0, "id": "GPU-0",
                                                         "resources": {"koordinator.sh/gpu-memory": "16Gi"}}]}}))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "devshare.cli.main", "webhook", "--tls-cert", str(certs.cert), "--tls-key",
         str(certs.key), "--host", "127.0.0.1", "--port", str(port), "--cluster", str(cluster),
         "--scheduler-name", "gpu-sched"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    client = Client(port, certs.ca_cert)
    try:
        deadline = time.monotonic() + FAILSAFE  # a hang guard: a loaded machine may take long to start it
        while True:
            try:
                assert client.request("GET", "/readyz") == (200, b"ok\n")
                break
            except (ConnectionError, OSError):
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "the webhook did not start"
                time.sleep(0.1)
        response = client.review("/mutate", pod({"koordinator.sh/gpu": "50"}))
        ops = json.loads(base64.b64decode(response["patch"]))
        assert {"op": "add", "path": "/spec/schedulerName", "value": "gpu-sched"} in ops
        refused = client.review("/validate", pod({"koordinator.sh/rdma": "100"}))  # no node has rdma
        assert refused["allowed"] is False and "'rdma'" in refused["status"]["message"]
    finally:
        client.close()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
