"""``devshare extender`` as a user runs it (``devshare inspect`` is ``test_inspect.py``'s)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from devshare.cli.main import app
from support.extender import bound_pod, device, node, pod, write_cluster
from support.imports import without_package
from support.waiting import FAILSAFE, eventually_in_thread

RUNNER = CliRunner()


def test_extender_flags_are_checked(tmp_path: Path) -> None:
    f = write_cluster(tmp_path / "c.yaml", [node("node-0")])
    out = RUNNER.invoke(app, ["extender", "--save", str(tmp_path / "o.yaml")])
    assert out.exit_code == 2 and "needs --cluster" in out.output
    out = RUNNER.invoke(app, ["extender", "--cluster", str(f), "--port", "0"])
    assert out.exit_code == 2 and "--port" in out.output
    out = RUNNER.invoke(app, ["extender", "--cluster", str(f), "--policy", "best"])
    assert out.exit_code == 2 and "unknown --policy 'best'" in out.output and "binpack" in out.output
    out = RUNNER.invoke(app, ["extender", "--cluster", str(f), "--core-weight", "2"])
    assert out.exit_code == 2 and "--core-weight" in out.output
    out = RUNNER.invoke(app, ["extender", "--cluster", str(f), "--event-loop", "trio"])
    assert out.exit_code == 2 and "unknown --event-loop 'trio'" in out.output and "uvloop" in out.output


def _own_address() -> str | None:
    """An address of this machine other than loopback, when it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 9))  # no packet is sent: the kernel picks the outgoing address
            address = str(s.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") else address


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(url: str, body: Any | None = None) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=FAILSAFE) as r:  # a hang guard
            raw = r.read()
            return r.status, json.loads(raw) if raw.startswith((b"{", b"[")) else raw.decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _serve(cluster: Path, save: Path, *extra: str, port: int = 0,
           log_level: str = "warning") -> tuple[subprocess.Popen[bytes], str]:
    """``devshare extender --cluster cluster --save save`` in a process, and its URL once it is ready."""
    port = port or _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "devshare.cli.main", "extender", "--cluster", str(cluster), "--save", str(save),
         "--port", str(port), "--log-level", log_level, *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(proc.communicate()[1].decode())
        try:
            return _call(base + "/readyz")[0] == 200
        except OSError:
            return False

    try:
        eventually_in_thread(ready, what="the extender ready")
    except BaseException:
        proc.kill()
        proc.communicate()
        raise
    return proc, base


def test_extender_serves_a_cluster_file_and_saves_binds(tmp_path: Path) -> None:
    f = write_cluster(tmp_path / "c.yaml", [node("node-0"), device("node-0", 2), bound_pod(), pod("p", core=50)])
    saved = tmp_path / "saved.yaml"
    port, metrics_port = _free_port(), _free_port()
    proc, base = _serve(f, saved, "--metrics-port", str(metrics_port), port=port, log_level="info")
    try:
        status, out = _call(base + "/filter", {"Pod": pod("p", core=50), "Nodes": None, "NodeNames": ["node-0"]})
        assert status == 200 and out["NodeNames"] == ["node-0"], out
        status, out = _call(base + "/bind", {"PodName": "p", "PodNamespace": "default",
                                             "PodUID": "uid-default-p", "Node": "node-0"})
        assert status == 200 and out == {"Error": ""}
        status, out = _call(base + "/filter", b"garbage")
        assert status == 400
        # the read-only port: on 127.0.0.1 unless --metrics-host says otherwise (issue 37)
        assert _call(f"http://127.0.0.1:{metrics_port}/healthz")[0] == 200
        outside = _own_address()
        if outside is not None:
            with socket.socket() as s, contextlib.suppress(OSError):
                s.settimeout(2)
                s.connect((outside, metrics_port))
                raise AssertionError(f"the read-only port answers on {outside}")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err.decode()
    log = err.decode()  # the start-up lines, in an operator's words (issue 40)
    assert (f"devshare extender listening: kube-scheduler's requests on http://127.0.0.1:{port} (plain HTTP); "
            f"read-only port (/metrics, /healthz, /readyz, /inspect, /ui) on http://127.0.0.1:{metrics_port} "
            "(plain HTTP)") in log
    assert "leader election: off: this extender binds every pod it is asked to" in log
    assert "cluster synced: 1 node, 2 pods, in " in log
    for jargon in ("lane", "frozen", "garbage", "informer"):
        assert jargon not in log, log
    objs = [d for d in yaml.safe_load_all(saved.read_text()) if d]
    p = next(o for o in objs if o["kind"] == "Pod" and o["metadata"]["name"] == "p")
    assert p["spec"]["nodeName"] == "node-0"
    inspect = RUNNER.invoke(app, ["inspect", "--cluster", str(saved), "-o", "json"])
    pods = [d["pods"] for d in json.loads(inspect.stdout)["nodes"][0]["devices"]]
    assert sorted(x for ps in pods for x in ps) == ["default/bound/main", "default/p/main"]


def test_every_bind_answered_is_in_the_saved_file_after_kill_9(tmp_path: Path) -> None:
    """--save: a bind is answered only once the file holding it is on disk, so a process killed at
    once (SIGKILL: no shutdown write) loses no acknowledged bind; binds sent together share writes."""
    nodes = [o for i in range(4) for o in (node(f"node-{i}"), device(f"node-{i}", 4))]
    f = write_cluster(tmp_path / "c.yaml", [*nodes, *(pod(f"p{i}", core=25) for i in range(48))])
    proc, base = _serve(f, f)

    def bind(i: int) -> tuple[str, Any]:
        return f"p{i}", _call(base + "/bind", {"PodName": f"p{i}", "PodNamespace": "default",
                                               "PodUID": f"uid-default-p{i}", "Node": f"node-{i % 4}"})[1]

    try:
        with ThreadPoolExecutor(8) as pool:
            answers = dict(pool.map(bind, range(48)))
    finally:
        proc.kill()  # SIGKILL, at once after the last answer: nothing is written on the way out
        proc.communicate(timeout=FAILSAFE)
    acknowledged = {name for name, out in answers.items() if out == {"Error": ""}}
    assert len(acknowledged) == 48, answers
    saved = {o["metadata"]["name"]: o for o in yaml.safe_load_all(f.read_text()) if o and o["kind"] == "Pod"}
    assert {n for n in acknowledged if saved[n]["spec"].get("nodeName")} == acknowledged


def test_the_claim_ledger_is_on_unless_turned_off_and_then_it_warns(tmp_path: Path, monkeypatch: Any,
                                                                     caplog: Any) -> None:
    import devshare.server.extender.serve as serve_module

    seen: list[Any] = []
    monkeypatch.setattr(serve_module, "serve", lambda backend, options, **kw: seen.append(options))
    f = write_cluster(tmp_path / "c.yaml", [node("node-0")])
    assert RUNNER.invoke(app, ["extender", "--cluster", str(f)]).exit_code == 0
    out = RUNNER.invoke(app, ["extender", "--cluster", str(f), "--no-claim-ledger"])
    assert out.exit_code == 0, out.output
    assert [o.claim_ledger for o in seen] == [True, False]
    assert [o.event_loop for o in seen] == ["auto", "auto"]
    assert RUNNER.invoke(app, ["extender", "--cluster", str(f), "--event-loop", "asyncio"]).exit_code == 0
    assert seen[-1].event_loop == "asyncio"
    assert "--no-claim-ledger: binds are not recorded in the claim ledger" in caplog.text


def test_event_loop_uvloop_without_the_package_is_one_error_line(tmp_path: Path, monkeypatch: Any) -> None:
    without_package(monkeypatch, "uvloop")
    f = write_cluster(tmp_path / "c.yaml", [node("node-0")])
    out = RUNNER.invoke(app, ["extender", "--cluster", str(f), "--event-loop", "uvloop"])
    assert out.exit_code == 2 and "--event-loop uvloop" in out.output and "pip install uvloop" in out.output
    assert "Traceback" not in out.output
