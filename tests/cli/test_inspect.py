"""``devshare inspect`` (:mod:`devshare.cli.inspect`): per node and device, what is used and by whom, as
JSON, YAML or a table that keeps names whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from devshare.cli.inspect import _cell
from devshare.cli.main import app
from devshare.model.quantity import human_bytes
from support import REPO
from support.extender import GiB, bound_pod, device, node, pod, write_cluster

RUNNER = CliRunner()


def test_inspect_json_and_table(tmp_path: Path) -> None:
    f = write_cluster(tmp_path / "c.yaml", [node("node-0"), device("node-0", 2), bound_pod(), pod("pending", core=10)])
    out = RUNNER.invoke(app, ["inspect", "--cluster", str(f), "-o", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    devs = data["nodes"][0]["devices"]
    assert [d["pods"] for d in devs] == [[], ["default/bound/main"]]
    assert devs[1]["used"]["core"] == 50 and devs[1]["used"]["memory"] == 2**33
    table = RUNNER.invoke(app, ["inspect", "--cluster", str(f)], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "default/bound/main" in table.stdout and "50/100%" in table.stdout


def test_inspect_bad_input_is_one_line(tmp_path: Path) -> None:
    missing = RUNNER.invoke(app, ["inspect", "--cluster", str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2 and "no such file" in missing.output
    bad = write_cluster(tmp_path / "bad.yaml", [{"kind": "Pod"}])
    out = RUNNER.invoke(app, ["inspect", "--cluster", str(bad), "-o", "json"])
    assert out.exit_code == 2 and "metadata.name" in out.output
    fmt = RUNNER.invoke(app, ["inspect", "--cluster", str(bad), "-o", "xml"])
    assert fmt.exit_code == 2 and "unknown output format" in fmt.output



def test_inspect_table_keeps_names_whole_at_80_columns() -> None:
    r = RUNNER.invoke(app, ["inspect", "--cluster", str(REPO / "tests/cli/long-names.yaml")], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "…" not in r.output
    assert all(len(line) <= 80 for line in r.output.splitlines())
    joined = "".join(line.split("  ")[0].strip() for line in r.output.splitlines()[3:])  # the node column
    assert "gpu-node-with-a-really-long-name-in-rack-42.example.internal" in joined
    pods = "".join(line.rstrip().rsplit(" ", 1)[-1] for line in r.output.splitlines()[3:] if line.strip())
    assert "team-research-vision/a-training-job-with-a-long-generated-name-7f9c8d/trainer-main" in pods
    r = RUNNER.invoke(app, ["inspect", "--cluster", str(REPO / "examples/cluster.yaml")], env={"COLUMNS": "80"})
    assert "team-a/notebook/main" in r.output and "50/100%" in r.output and "7.5/15 GiB" in r.output


def test_yaml_is_the_json_document(tmp_path: Path) -> None:
    f = write_cluster(tmp_path / "c.yaml", [node("node-0"), device("node-0", 2), bound_pod()])
    as_json = RUNNER.invoke(app, ["inspect", "--cluster", str(f), "-o", "json"])
    as_yaml = RUNNER.invoke(app, ["inspect", "--cluster", str(f), "-o", "yaml"])
    assert as_json.exit_code == as_yaml.exit_code == 0, as_yaml.output
    assert yaml.safe_load(as_yaml.stdout) == json.loads(as_json.stdout)


def test_the_table_shows_sick_cards_and_nodes_without_devices(tmp_path: Path) -> None:
    f = write_cluster(tmp_path / "c.yaml", [node("node-0"), device("node-0", 2, unhealthy=(1,)), node("node-1"),
                                            device("node-1", 0)])
    out = RUNNER.invoke(app, ["inspect", "--cluster", str(f)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    rows = [line.split() for line in out.stdout.splitlines() if line.strip()]
    assert ["node-0", "gpu", "0", "ok", "0/100%", "0/16", "GiB"] in rows
    assert ["gpu", "1", "UNHEALTHY", "0/100%", "0/16", "GiB"] in rows
    assert ["node-1", "-"] in rows


def test_a_cluster_file_and_a_kubeconfig_are_not_both_taken(tmp_path: Path) -> None:
    f = write_cluster(tmp_path / "c.yaml", [node("node-0")])
    out = RUNNER.invoke(app, ["inspect", "--cluster", str(f), "--kubeconfig", str(tmp_path / "kubeconfig")])
    assert out.exit_code == 2
    assert "error: give either --cluster FILE or --kubeconfig PATH, not both" in out.output


@pytest.mark.parametrize(("used", "total", "key", "cell"), [
    ({"core": 50}, {"core": 100}, "core", "50/100%"),
    ({}, {"core": 100}, "core", "0/100%"),
    ({"memory": 15 * GiB // 2}, {"memory": 15 * GiB}, "memory", "7.5/15 GiB"),
    ({"memory": 512 * 2**20}, {"memory": 16 * GiB}, "memory", "512 MiB/16 GiB"),
    ({}, {"memory": 16 * GiB}, "memory", "0/16 GiB"),
    ({"memory": 1}, {}, "memory", "-"),
])
def test_a_cell_gives_the_unit_once_when_both_share_it(used: dict[str, Any], total: dict[str, Any], key: str,
                                                        cell: str) -> None:
    fmt = (lambda v: f"{v:g}%") if key == "core" else human_bytes
    assert _cell(used, total, key, fmt) == cell
