"""``devshare config`` (:mod:`devshare.cli.config`): print the defaults, check a file. What the file
means is ``tests/test_config.py``'s; here, what the two commands print and how they fail."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from devshare.cli.main import app

RUNNER = CliRunner()
HEADER = "apiVersion: devshare.io/v1alpha1\nkind: DevshareConfiguration\n"


def test_the_defaults_are_a_file_check_accepts_unchanged(tmp_path: Path) -> None:
    out = RUNNER.invoke(app, ["config", "defaults"])
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith(HEADER)
    doc = yaml.safe_load(out.stdout)
    assert doc["scheduling"]["coreWeight"] == 50 and doc["deviceTypes"]["gpu"] is True
    f = tmp_path / "defaults.yaml"
    f.write_text(out.stdout)
    checked = RUNNER.invoke(app, ["config", "check", str(f)])
    assert checked.exit_code == 0, checked.output
    assert checked.stdout == out.stdout
    assert checked.stderr == ""


def test_check_prints_the_file_with_every_default_filled_in(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(HEADER + "scheduling:\n  coreWeight: 80\ndeviceTypes:\n  fpga: false\n")
    out = RUNNER.invoke(app, ["config", "check", str(f)])
    assert out.exit_code == 0, out.output
    doc = yaml.safe_load(out.stdout)
    defaults = yaml.safe_load(RUNNER.invoke(app, ["config", "defaults"]).stdout)
    assert doc["scheduling"] == {**defaults["scheduling"], "coreWeight": 80}
    assert doc["deviceTypes"] == {"gpu": True, "rdma": True, "fpga": False}  # gpu, rdma: on by default
    assert doc["dialects"] == defaults["dialects"]
    assert doc["policies"] == defaults["policies"] and doc["quotas"] == {}


def test_a_bad_file_is_one_error_line_naming_the_field(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(HEADER + "scheduling:\n  coreWeight: high\n")
    out = RUNNER.invoke(app, ["config", "check", str(f)])
    assert out.exit_code == 2
    assert out.stdout == ""
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("error: ") and "scheduling.coreWeight" in line


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    out = RUNNER.invoke(app, ["config", "check", str(tmp_path / "nope.yaml")])
    assert out.exit_code == 2
    assert out.stderr.strip() == f"error: {tmp_path / 'nope.yaml'}: no such file"


def test_a_binary_file_is_one_error_line(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_bytes(HEADER.encode() + b"\xd0\xff\n")
    out = RUNNER.invoke(app, ["config", "check", str(f)])
    assert out.exit_code == 2
    assert out.stderr.strip().splitlines() == [
        "error: a file given is not a text file (byte 0xd0 at position 61 is not UTF-8): give a YAML or JSON file"]


def test_check_lists_every_device_type_with_the_value_the_extender_runs_with(tmp_path: Path) -> None:
    """What check prints is a complete file: read back, it means what the checked file meant."""
    from devshare.config import load_config

    f = tmp_path / "c.yaml"
    f.write_text(HEADER + "deviceTypes:\n  gpu: {enabled: false}\n  npu: {resources: [example.com/npu]}\n")
    out = RUNNER.invoke(app, ["config", "check", str(f)])
    assert out.exit_code == 0, out.output
    assert yaml.safe_load(out.stdout)["deviceTypes"] == {
        "gpu": {"enabled": False, "resources": []}, "rdma": True, "fpga": True,
        "npu": {"enabled": True, "resources": ["example.com/npu"]}}
    printed = tmp_path / "printed.yaml"
    printed.write_text(out.stdout)
    before, after = load_config(f).device_types, load_config(printed).device_types
    assert (after.disabled(), after.configured()) == (before.disabled(), before.configured())
    assert RUNNER.invoke(app, ["config", "check", str(printed)]).stdout == out.stdout  # a fixed point


def test_check_lists_every_dialect_with_the_value_the_extender_runs_with(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(HEADER + "dialects: {mgpu: false}\n")
    out = RUNNER.invoke(app, ["config", "check", str(f)])
    assert out.exit_code == 0, out.output
    defaults = yaml.safe_load(RUNNER.invoke(app, ["config", "defaults"]).stdout)
    assert yaml.safe_load(out.stdout)["dialects"] == {**defaults["dialects"], "mgpu": False}
