"""The extender's read-only port (issue 37): served over TLS, with the extender's certificate, when
the extender uses TLS; and the start-up lines say which replica binds (issue 40; where and how:
tests/server/extender/test_listening.py)."""

from __future__ import annotations

import logging
import socket
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from devshare.server.extender.serve import BackgroundEnded, ExtenderOptions, _run, build_app, election_line, serving
from devshare.server.tls import CertReloader, make_serving_cert
from support.extender import cluster


async def test_the_read_only_port_uses_tls_when_the_extender_does(tmp_path: Path) -> None:
    cert = make_serving_cert("devshare-extender", "devshare-system", tmp_path, extra_names=("localhost", "127.0.0.1"))
    tls = CertReloader(cert.cert, cert.key)
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = build_app(cluster(nodes=1, gpus=1), ExtenderOptions(metrics_port=port))
    trust = ssl.create_default_context(cafile=str(cert.ca_cert))
    async with serving(app, "127.0.0.1", 0, ssl=tls.context, metrics_sock=sock), aiohttp.ClientSession() as http:
        async with http.get(f"https://127.0.0.1:{port}/healthz", ssl=trust) as r:
            assert r.status == 200
        async with http.get(f"https://127.0.0.1:{port}/metrics", ssl=trust) as r:
            assert r.status in (200, 503)  # 503 until synced; either way served over TLS
        with pytest.raises(aiohttp.ClientError):  # in the clear: no answer
            async with http.get(f"http://127.0.0.1:{port}/healthz") as r:
                await r.read()


def test_the_election_line_says_which_replica_binds() -> None:
    assert election_line(ExtenderOptions()).startswith("leader election: off: this extender binds every pod")
    on = election_line(ExtenderOptions(leader_election=True, identity="pod-1"))
    assert on == "leader election: on (Lease devshare-extender, identity pod-1): binds while it holds the Lease"
    follow = election_line(ExtenderOptions(follow_lease="devshare-scheduler", pod_name="sched-0"))
    assert "follows the Lease devshare-scheduler of the kube-scheduler in this pod (sched-0)" in follow


async def test_an_error_in_a_background_task_is_logged_and_ends_the_serving(caplog: pytest.LogCaptureFixture) -> None:
    """An exception in any background task ends their task group: every watch and the election stop.
    The extender says so with the traceback and stops serving (the process exits 1 to be restarted),
    rather than answer kube-scheduler from a state that nothing updates any more."""

    class BrokenDra:  # the DRA controller's API: its first list fails as a bug would
        async def list(self, kind: Any) -> Any:
            raise RuntimeError("dictionary changed size during iteration")

    app = build_app(cluster(nodes=1, gpus=1), ExtenderOptions(lane=False, dra_api=BrokenDra()))  # type: ignore[arg-type]
    with caplog.at_level(logging.CRITICAL), pytest.raises(BackgroundEnded):
        await _run(app, "127.0.0.1", 0, None, None, lane=False, listening=lambda: None)
    line = next(r for r in caplog.records if r.levelno == logging.CRITICAL)
    assert "background tasks stopped" in line.getMessage() and "exits to be restarted" in line.getMessage()
    assert "RuntimeError: dictionary changed size during iteration" in caplog.text  # the traceback, logged
