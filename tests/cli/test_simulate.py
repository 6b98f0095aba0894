from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from devshare.cli.main import app


def test_json_shape_and_plot(small_trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = small_trace
    out, png = tmp_path / "out.json", tmp_path / "p.png"
    r = CliRunner().invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "bestfit",
                                 "--policy", "devshare", "--seeds", "42-43", "--workers", "1",
                                 "--json", str(out), "--plot", str(png)])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert [d["policy"] for d in data] == ["bestfit", "devshare"]
    for d in data:
        assert d["trace"] == "openb_pod_list_small"
        assert d["seeds"] == [42, 43]
        assert set(d["allocated_pct"]) == {"42", "43"}
        assert all(len(v) == 131 for v in d["allocated_pct"].values())
        assert set(d["unallocated_pct_at_100"]) == {"mean", "median"}
        # keys added to the contract: the offline optimum and floor per seed, with their solve times
        opt = d["optimum_unallocated_pct_at_100"]
        assert set(opt["per_seed"]) == set(opt["seconds"]) == {"42", "43"} and opt["exact"]
        assert opt["mean"] <= d["unallocated_pct_at_100"]["mean"] + 1e-9
        assert d["floor_unallocated_pct_at_100"]["forced_before_pct"] == 95
        assert set(d["optimum_allocated_pct"]["42"]) >= {"100", "130"}
        assert set(d["first_skip_pct"]) == set(d["seconds"]) == {"42", "43"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "bestfit" in r.output and "optimum" in r.output and "floor" in r.output


def test_plot_format_follows_the_suffix(small_trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = small_trace
    jpg = tmp_path / "out.jpg"
    r = CliRunner().invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd",
                                 "--seeds", "42", "--workers", "1", "--no-optimum", "--plot", str(jpg)])
    assert r.exit_code == 0, r.output
    assert jpg.read_bytes()[:3] == b"\xff\xd8\xff"  # JPEG, not PNG bytes under a .jpg name
    r = CliRunner().invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd",
                                 "--seeds", "42", "--workers", "1", "--plot", str(tmp_path / "out.gif")])
    assert r.exit_code == 2 and r.output.strip().startswith("error: ") and ".gif" in r.output, r.output


def test_single_policy_json_is_one_object(small_trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = small_trace
    out = tmp_path / "one.json"
    r = CliRunner().invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "fgd",
                                 "--seeds", "42", "--workers", "1", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["policy"] == "fgd"


def test_bad_input_is_one_line_exit_2(small_trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = small_trace
    bad = tmp_path / "bad.csv"
    bad.write_text(pods.read_text().replace("p003,", "p003,x"))
    cases = [
        ["--pods", str(bad), "--nodes", str(nodes)],
        ["--pods", str(pods), "--nodes", str(nodes), "--policy", "magic"],
        ["--pods", str(pods), "--nodes", str(nodes), "--seeds", "9-1"],
        ["--pods", str(tmp_path / "missing.csv"), "--nodes", str(nodes)],
    ]
    for args in cases:
        r = CliRunner().invoke(app, ["simulate", *args, "--workers", "1"])
        assert r.exit_code == 2, (args, r.output)
        assert r.output.strip().startswith("error: ") and len(r.output.strip().splitlines()) == 1, r.output


def test_window_option(small_trace: tuple[Path, Path], tmp_path: Path) -> None:
    nodes, pods = small_trace
    base = ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "devshare", "--seeds", "42-43",
            "--workers", "1", "--no-optimum"]
    every, narrow = tmp_path / "every.json", tmp_path / "narrow.json"
    r = CliRunner().invoke(app, [*base, "--json", str(every)])
    assert r.exit_code == 0, r.output
    assert "window" not in json.loads(every.read_text()) and "kube-scheduler's window" not in r.output
    r = CliRunner().invoke(app, [*base, "--window", "default", "--json", str(narrow)])
    assert r.exit_code == 0, r.output
    assert "kube-scheduler's window: 5 of 5 nodes (percentageOfNodesToScore unset: adaptive)" in r.output
    a, b = json.loads(every.read_text()), json.loads(narrow.read_text())
    assert b["window"]["percentage_of_nodes_to_score"] == "default" and b["window"]["nodes_to_find"] == 5
    assert set(b["window"]["later_window_pods"]) == set(b["window"]["cycles_per_pod"]) == {"42", "43"}
    assert a["allocated_pct"] == b["allocated_pct"]  # under 100 nodes the window is every node
    for bad in ("0", "101", "ten", "-5"):
        r = CliRunner().invoke(app, [*base, "--window", bad])
        assert r.exit_code == 2 and r.output.strip().startswith("error: ") and "--window" in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1, r.output


def test_dra_baseline_runs_as_one_more_policy(small_trace: tuple[Path, Path], tmp_path: Path) -> None:
    """--dra-baseline (issue 38): kube-scheduler's own DRA allocation beside the chosen policies."""
    nodes, pods = small_trace
    out = tmp_path / "r.json"
    r = CliRunner().invoke(app, ["simulate", "--nodes", str(nodes), "--pods", str(pods), "--policy", "devshare",
                            "--dra-baseline", "--seeds", "42", "--json", str(out), "--no-optimum", "--workers", "1"])
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert [d["policy"] for d in data] == ["devshare", "dra-baseline"]
    assert len(data[1]["allocated_pct"]["42"]) == 131
