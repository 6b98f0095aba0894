"""Running the webhook (server/webhook/serve.py) in a process of its own: over HTTPS with the given pair,
the TLS metrics on its /metrics, a renewed pair served without a restart, a clean exit on SIGTERM.
Through ``devshare webhook`` (its options, a review answered): tests/cli/test_webhook.py."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

from devshare.server.tls import ServingCert, make_serving_cert
from support.waiting import FAILSAFE, eventually_in_thread
from support.webhook_client import Client

SERVE = """
import logging, sys
from pathlib import Path
from devshare.server.webhook.app import WebhookConfig
from devshare.server.webhook.serve import serve
logging.basicConfig(level=logging.INFO, format="%(message)s")
serve(WebhookConfig(scheduler_name="gpu-sched"), tls_cert=Path(sys.argv[1]), tls_key=Path(sys.argv[2]),
      host="127.0.0.1", port=int(sys.argv[3]), reload_interval=0.0)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def installed(pair: ServingCert, cert: Path, key: Path) -> None:
    """Put ``pair`` in place as a renewed Secret would be: each file replaced whole."""
    for src, dst in ((pair.cert, cert), (pair.key, key)):
        shutil.copy(src, dst.with_suffix(".new"))
        os.replace(dst.with_suffix(".new"), dst)


def answers(client: Client, path: str) -> tuple[int, bytes] | None:
    try:
        return client.request("GET", path)
    except OSError:  # not listening yet, or a certificate this client does not trust (yet)
        client.close()
        return None


def test_served_over_https_with_the_pair_it_is_given_and_renewed(tmp_path: Path, certs: ServingCert) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(certs.cert, cert)
    shutil.copy(certs.key, key)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(cert), str(key), str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, text=True)
    first, renewed = Client(port, certs.ca_cert), None
    try:
        def ready() -> bool:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            return answers(first, "/readyz") == (200, b"ok\n")

        eventually_in_thread(ready, what="the webhook to answer /readyz")
        status, body = first.request("GET", "/metrics")
        assert status == 200
        assert b"devshare_tls_certificate_expiry_timestamp_seconds" in body  # the TLS collector, registered
        assert b"devshare_webhook_reviews" in body and b"devshare_build_info" in body

        # the Secret renewed with a pair of another CA: new connections get it, no restart
        other = make_serving_cert("devshare-webhook", "devshare-system", tmp_path / "renewed",
                                  extra_names=("localhost", "127.0.0.1"))
        installed(other, cert, key)
        renewed = Client(port, other.ca_cert)
        eventually_in_thread(lambda: answers(renewed, "/healthz") is not None, what="the renewed pair served")
        first.close()
        assert answers(first, "/healthz") is None  # the old CA no longer verifies what is served
    finally:
        first.close()
        if renewed is not None:
            renewed.close()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=FAILSAFE)
    assert proc.returncode == 0, out
    assert f"devshare webhook on https://127.0.0.1:{port} (scheduler gpu-sched)" in out
    assert "Traceback" not in out
