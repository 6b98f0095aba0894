"""The stumbles of a first day (issue 15): every bad command line or file is one ``error:`` line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from devshare.cli.main import app
from devshare.model.device import parse_device
from devshare.model.errors import InvalidDevice

ROOT = Path(__file__).resolve().parents[2]
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
                 ["topology"], ["agent", "report"], ["agent", "run"], []):
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
    line = one_error_line(devshare("schedule", "--cluster", "examples/cluster.yaml", str(bad)))
    assert f"{bad}, line 3" in line


def test_an_empty_cluster_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing\n")
    for args in (("inspect", "--cluster", str(empty)),
                 ("schedule", "--cluster", str(empty), "examples/pods.yaml"),
                 ("extender", "--cluster", str(empty), "--port", "1")):
        assert "no Node, Device or Pod object" in one_error_line(devshare(*args))


def device(**fields: object) -> dict[str, object]:
    d: dict[str, object] = {"type": "gpu", "minor": 0, "id": "GPU-0",
                            "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "16Gi"}}
    d.update(fields)
    return {"kind": "Device", "metadata": {"name": "n"}, "spec": {"devices": [{k: v for k, v in d.items()
                                                                              if v is not None}]}}


@pytest.mark.parametrize(("fields", "message"), [
    ({"minor": None}, "minor is missing"),
    ({"id": None}, "id is missing"),
    ({"id": ""}, "id is missing"),
    ({"resources": None}, "resources are missing"),
    ({"resources": {}}, "resources are missing"),
    ({"resources": {"koordinator.sh/gpu-core": "100"}}, "a gpu needs its memory"),
    ({"type": "rdma", "resources": None}, "koordinator.sh/rdma"),
])
def test_incomplete_devices_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidDevice, match=message):
        parse_device(device(**fields))
    assert parse_device(device()).devices[0].memory == 16 * 2**30
