"""The extender over TLS with client certificates (kube-scheduler's extender ``tlsConfig``), and its
refusal to listen on a non-loopback address in the clear (issue 12)."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from devshare.cli.main import app as cli
from devshare.server.extender.serve import ExtenderOptions, build_app
from devshare.server.tls import CertReloader, ServingCert, make_serving_cert
from support.certs import signed_pair
from support.extender import cluster, device, node, pod
from support.server import ServerThread

NAMES = ("localhost", "127.0.0.1")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("pki")
    server = make_serving_cert("devshare-extender", "devshare-system", root / "server", extra_names=NAMES)
    client_ca = make_serving_cert("clients", "devshare-system", root / "client-ca")
    client = signed_pair(client_ca, root / "client", cn="kube-scheduler", names=(), usage="clientAuth")
    stranger_ca = make_serving_cert("stranger", "elsewhere", root / "stranger-ca")
    stranger = signed_pair(stranger_ca, root / "stranger", cn="kube-scheduler", names=(), usage="clientAuth")
    return {"server": server, "client_ca": client_ca, "client": client, "stranger": stranger}


@pytest.fixture
def served(pki: dict[str, Any]) -> Iterator[ServerThread]:
    server: ServingCert = pki["server"]
    tls = CertReloader(server.cert, server.key, client_ca=pki["client_ca"].ca_cert)
    srv = ServerThread(build_app(cluster(2, gpus=2), ExtenderOptions(client_auth=True)), tls.context)
    yield srv
    srv.close()


def call(srv: ServerThread, pki: dict[str, Any], method: str, path: str, body: Any = None,
         client: tuple[Path, Path] | None = None) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=str(pki["server"].ca_cert))
    if client is not None:
        ctx.load_cert_chain(str(client[0]), str(client[1]))
    conn = http.client.HTTPSConnection("localhost", srv.port, context=ctx, timeout=10)
    try:
        data = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


FILTER = {"Pod": pod("p", core=50), "Nodes": None, "NodeNames": ["node-0", "node-1"]}


def test_client_with_a_certificate_of_the_ca_is_served(served: ServerThread, pki: dict[str, Any]) -> None:
    status, text = call(served, pki, "POST", "/filter", FILTER, client=pki["client"])
    assert status == 200, text
    assert sorted(json.loads(text)["NodeNames"]) == ["node-0", "node-1"]


@pytest.mark.parametrize("path", ["/filter", "/prioritize", "/bind", "/preempt"])
def test_client_without_a_certificate_is_refused_but_probes_work(served: ServerThread, pki: dict[str, Any],
                                                                 path: str) -> None:
    status, text = call(served, pki, "POST", path, FILTER)
    assert status == 403, text
    assert "client certificate" in json.loads(text)["error"]
    assert call(served, pki, "GET", "/inspect")[0] == 403
    for probe in ("/healthz", "/readyz", "/metrics"):
        assert call(served, pki, "GET", probe)[0] == 200, probe


@pytest.mark.parametrize("path", ["/ui/occupancy", "/ui/", "/ui", "/inspect"])
def test_the_ui_needs_what_inspect_needs(served: ServerThread, pki: dict[str, Any], path: str) -> None:
    """Issue 37: /ui/occupancy names every pod and what it holds; it answered 200 without a certificate
    while /inspect answered 403."""
    status, text = call(served, pki, "GET", path)
    assert status == 403, text
    assert "client certificate" in json.loads(text)["error"]
    status, text = call(served, pki, "GET", path, client=pki["client"])
    assert status in (200, 302), text


def test_client_certificate_of_another_ca_fails_the_handshake(served: ServerThread, pki: dict[str, Any]) -> None:
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        call(served, pki, "POST", "/filter", FILTER, client=pki["stranger"])


# --- where the extender may listen without TLS (listen_check: tests/server/extender/test_listening.py)


def test_cli_refuses_a_public_address_without_tls(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump_all([node("node-0"), device("node-0", 1)], sort_keys=False))
    out = CliRunner().invoke(cli, ["extender", "--cluster", str(f), "--host", "0.0.0.0", "--port", "1"])
    assert out.exit_code == 2, out.output
    assert "--tls-cert" in out.output and "--insecure" in out.output and "Traceback" not in out.output
    half = CliRunner().invoke(cli, ["extender", "--cluster", str(f), "--tls-cert", str(f)])
    assert half.exit_code == 2 and "--tls-key" in half.output, half.output
