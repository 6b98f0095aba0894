"""The stumbles of a first day (issue 15): every bad command line or file is one ``error:`` line."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from devshare.cli.main import app
from support import REPO

ROOT = REPO
runner = CliRunner()


def devshare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devshare.cli.main", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


def one_error_line(r: subprocess.CompletedProcess[str]) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr and "╭" not in r.stderr
    return lines[0]


@pytest.mark.parametrize(("args", "expected"), [
    (("schedule", "--bogus"), "no such option: --bogus"),
    (("schedule", "examples/pods.yaml"), "missing option '--cluster'"),
    (("extender", "--port", "abc"), "'--port'"),
    (("nosuch",), "no such command 'nosuch'"),
    (("agent", "report", "--bogus"), "devshare agent report: no such option"),
])
def test_usage_errors_are_one_line(args: tuple[str, ...], expected: str) -> None:
    line = one_error_line(devshare(*args))
    assert expected in line
    assert "--help" in line


def test_usage_errors_through_the_test_runner_too() -> None:
    r = runner.invoke(app, ["inspect", "--bogus"])
    assert r.exit_code == 2
    assert r.output.strip().startswith("error: devshare inspect: no such option: --bogus")


def test_help_has_no_typer_placeholders() -> None:
    for args in (["schedule"], ["simulate"], ["extender"], ["webhook"], ["webhook", "cert"], ["inspect"],
                 ["topology"], ["agent", "report"], ["agent", "run"], ["config", "check"], ["config", "defaults"], []):
        r = runner.invoke(app, [*args, "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0, r.output
        for placeholder in ("<bool>", "<list[str]>", "<path>", "<str>", "<int>", "<float>", "{pods}", "{"):
            assert placeholder not in r.output, (args, placeholder, r.output)
    r = runner.invoke(app, ["schedule", "--help"], env={"COLUMNS": "200"})
    assert "Usage: devshare schedule [OPTIONS] PODS" in r.output
    assert "FILE" in r.output


def test_yaml_errors_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Node\nmetadata: {name: a\n  x: [\n")
    line = one_error_line(devshare("inspect", "--cluster", str(bad)))
    assert f"{bad}, document 1, line 3, column 4: not valid YAML" in line
    assert "<unicode string>" not in line
    line = one_error_line(devshare("schedule", "--cluster", "examples/cluster.yaml", str(bad)))  # the pods file
    assert f"{bad}, document 1, line 3, column 4: not valid YAML" in line  # the same reader


def test_an_empty_cluster_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    for args in (("webhook", "--cluster", str(empty), "--tls-cert", "tests/cli/missing.crt"),
                 ("inspect", "--cluster", str(empty)),
                 ("schedule", "--cluster", str(empty), "examples/pods.yaml"),
                 ("extender", "--cluster", str(empty), "--port", "1")):
        assert "no Node, Device or Pod object" in one_error_line(devshare(*args))


def test_trace_pods_larger_than_any_node_are_reported(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,32000,131072,2,T4\nn1,96000,393216,8,G2\n")
    pods = tmp_path / "openb_pod_list_big.csv"
    header = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
              "deletion_time,scheduled_time\n")
    rows = "".join(f"p{i:03d},1000,1024,1,500,,LS,Running,0,0,0\n" for i in range(10))
    pods.write_text(header + rows + "huge,1000,1024,64,1000,,LS,Running,0,0,0\n")
    r = runner.invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "bestfit",
                            "--seeds", "42", "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert "1 pod(s) of openb_pod_list_big ask for more GPUs than any node has (at most 8): huge" in r.output


PODS = """
apiVersion: v1
kind: Pod
metadata: {name: t4}
spec:
  nodeSelector: {devshare.io/gpu-model: T4}
  containers:
  - {name: main, resources: {limits: {koordinator.sh/gpu-core: "60", koordinator.sh/gpu-memory: 6Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: two}
spec:
  nodeSelector: {devshare.io/gpu-model: T4}
  containers:
  - {name: main, resources: {limits: {nvidia.com/gpu: "2"}}}
---
apiVersion: v1
kind: Pod
metadata: {name: absurd}
spec:
  containers:
  - {name: main, resources: {limits: {koordinator.sh/gpu-core: "1e30", koordinator.sh/gpu-memory: 6Gi}}}
"""


def test_schedule_reasons_name_the_node_and_do_not_contradict(tmp_path: Path) -> None:
    import json

    pods = tmp_path / "pods.yaml"
    pods.write_text(PODS)
    r = runner.invoke(app, ["schedule", "--cluster", str(ROOT / "examples/cluster.yaml"), str(pods)])
    assert r.exit_code == 2, r.output  # "absurd" is bad input: the webhook would refuse it
    why = {p["pod"]: p["reason"] for p in json.loads(r.output)["placements"]}
    assert "node(s)" not in why["default/t4"]
    assert "gpu-node-1: GPU model A100 is not one of T4" in why["default/t4"]
    assert "gpu-node-2: needs one gpu with 60% compute" in why["default/t4"]
    # the count of large-enough cards is explained by what no freed capacity changes, not by "in use"
    assert "gpu-node-2: needs 2 whole gpu; only 1 of its 2 gpu device(s) are healthy and that large" \
        in why["default/two"]
    assert "(gpu 1: unhealthy)" in why["default/two"] and "in use" not in why["default/two"]
    # a huge value is refused as such, not answered with a 29-digit "multiple of" suggestion
    assert "1024 whole devices" in why["default/absurd"]
    assert "multiple of" not in why["default/absurd"]


def test_extender_says_listening_only_once_bound() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = devshare("extender", "--cluster", "examples/cluster.yaml", "--port", str(port))
    assert r.returncode == 2
    assert "listening" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: cannot listen on 127.0.0.1:{port}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "devshare.cli.main", "extender", "--cluster",
                             "examples/cluster.yaml", "--port", str(port)], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "listening" in line:
                assert f"devshare extender listening: kube-scheduler's requests on http://127.0.0.1:{port}" in line
                with socket.create_connection(("127.0.0.1", port), timeout=10):
                    pass  # the port answers by the time the line is written
                break
        else:
            raise AssertionError("the extender never said it was listening")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# --- issue 40: the conventions of a well-kept CLI ------------------------------------------------

def test_version() -> None:
    from devshare import __version__

    r = devshare("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"devshare {__version__}"


COMMANDS = (["schedule"], ["simulate"], ["extender"], ["webhook"], ["webhook", "cert"], ["inspect"], ["topology"],
            ["agent", "report"], ["agent", "run"], ["config", "check"], ["config", "defaults"], [])


@pytest.mark.parametrize("columns", ["40", "80", "200"])
def test_help_is_whole_at_any_width(columns: str) -> None:
    """Issue 40: rich cut flag help with "…" at 80 columns (leaderElection.resourceNam…). Help is now
    wrapped, never cut: every word of the option's help is there, at any width, with no box drawing."""
    for args in COMMANDS:
        r = runner.invoke(app, [*args, "--help"], env={"COLUMNS": columns})
        assert r.exit_code == 0, r.output
        assert "…" not in r.output and "╭" not in r.output, (args, r.output)
    r = runner.invoke(app, ["extender", "--help"], env={"COLUMNS": "80"})
    assert "leaderElection.resourceName," in r.output
    assert "scheduling.assumeTTLSeconds)" in r.output


def test_exit_codes_are_in_the_help() -> None:
    r = runner.invoke(app, ["--help"], env={"COLUMNS": "100"})
    assert "Exit codes: 0 done" in r.output and "2 bad input" in r.output


def test_agent_fake_help_points_at_a_file_a_clone_has() -> None:
    r = runner.invoke(app, ["agent", "report", "--help"], env={"COLUMNS": "200"})
    assert "shared/" not in r.output
    assert "examples/topologies/" in r.output
    assert (ROOT / "examples" / "topologies").is_dir()


@pytest.mark.parametrize("args", [("inspect",), ("extender", "--port", "1"),
                                  ("webhook", "--tls-cert", "tests/cli/x", "--tls-key", "y", "--kubeconfig", "/nope")])
def test_no_cluster_errors_name_the_cluster_file_option(args: tuple[str, ...], tmp_path: Path) -> None:
    """Issue 40: with no kubeconfig, the error said only that ~/.kube/config is missing."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    if args[0] == "webhook":  # the webhook checks its certificate first: give it a real pair
        from devshare.server.tls import make_serving_cert

        made = make_serving_cert("devshare-webhook", "devshare-system", tmp_path / "certs")
        args = ("webhook", "--tls-cert", str(made.cert), "--tls-key", str(made.key), "--kubeconfig",
                str(tmp_path / "none"))
    r = subprocess.run([sys.executable, "-m", "devshare.cli.main", *args], capture_output=True, text=True,
                       cwd=ROOT, timeout=120, env=env)
    line = one_error_line(r)
    assert "cannot load the cluster configuration" in line
    assert "--cluster FILE" in line


def test_tables_are_not_wrapped_when_piped() -> None:
    """Issue 40: piped, rich assumed 80 columns and broke headers apart ("paper / (10 / seeds)").
    Piped with no COLUMNS, a table is as wide as it needs: one line per row, headers whole."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    r = subprocess.run([sys.executable, "-m", "devshare.cli.main", "schedule", "--cluster", "examples/cluster.yaml",
                        "examples/pods.yaml", "-o", "table"], capture_output=True, text=True, cwd=ROOT, timeout=120,
                       env=env)
    assert r.returncode == 1, r.stderr  # two pods of examples/pods.yaml fit nowhere, on purpose
    lines = r.stdout.splitlines()
    assert "devices / reason" in lines[1]
    rows = lines[3:-1]
    assert len(rows) == 5, r.stdout  # one line per pod, the long reasons included
    assert any("team-d/too-big" in ln and "gpu-node-2: needs one gpu with 50% compute and 64 GiB" in ln for ln in rows)
