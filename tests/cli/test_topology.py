"""``devshare topology`` (:mod:`devshare.cli.topology`): the ``--available`` list it reads, the set it
prints, and its error lines (the search itself: tests/engine/test_topology.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from devshare.cli.main import app
from devshare.cli.topology import parse_available
from devshare.model.errors import InvalidInput
from support import REPO

TOPOLOGIES = REPO / "examples" / "topologies"
VOLTA = TOPOLOGIES / "dgx1-volta.json"
RUNNER = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    result = RUNNER.invoke(app, ["topology", *args])
    return result.exit_code, result.stdout, result.stderr


def test_indices_are_read_in_order_spaces_and_empty_parts_ignored() -> None:
    assert parse_available("3, 0 ,,5,", 8) == [3, 0, 5]
    assert parse_available("7", 8) == [7]


@pytest.mark.parametrize(("text", "message"), [
    ("0,x", "--available: 'x' is not a GPU index: give indices like 0,1,3"),
    ("1.5", "--available: '1.5' is not a GPU index"),
    ("8", "--available: GPU 8 is out of range: the machine has 8 GPUs (0..7)"),
    ("-1", "--available: GPU -1 is out of range"),
    ("2,2", "--available: GPU 2 is listed twice"),
    (" , ", "--available: no GPU index given: give indices like 0,1,3 (or leave --available out)"),
])
def test_bad_lists_say_what_is_wrong_and_how_to_write_one(text: str, message: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_available(text, 8)
    assert str(e.value).startswith(message)


@settings(deadline=None)  # no test depends on machine speed
@given(st.lists(st.integers(0, 15), min_size=1, unique=True), st.integers(16, 32))
def test_any_list_of_distinct_indices_in_range_reads_back(indices: list[int], gpus: int) -> None:
    text = " , ".join(map(str, indices))
    assert parse_available(text, gpus) == indices


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True), st.data())
def test_the_printed_set_is_count_gpus_among_the_available(available: list[int], data: st.DataObject) -> None:
    count = data.draw(st.integers(1, len(available)))
    out = RUNNER.invoke(app, ["topology", "--matrix", str(VOLTA), "--count", str(count),
                              "--available", ",".join(map(str, available))])
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout)
    assert len(result["gpus"]) == count and set(result["gpus"]) <= set(available)
    assert 0 <= result["bottleneck"] <= result["total"]


def test_cli_prints_the_best_set() -> None:
    code, out, _ = cli("--matrix", str(TOPOLOGIES / "seed-8gpu-bandwidth.json"), "--count", "4")
    assert code == 0
    assert json.loads(out) == {"gpus": [0, 1, 2, 3], "bottleneck": 48.33, "total": 434.03}


def test_cli_with_available_and_a_links_table() -> None:
    code, out, _ = cli("--matrix", str(VOLTA), "--count", "2",
                       "--available", "1, 2,5,6")
    assert code == 0
    assert json.loads(out) == {"gpus": [1, 2], "bottleneck": 50.0, "total": 50.0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--count", "9"], "error: --count: 9 GPUs asked but only 8 available"),
        (["--count", "3", "--available", "0,1"], "error: --count: 3 GPUs asked but only 2 available"),
        (["--count", "0"], "error: --count: must be at least 1, got 0"),
        (["--count", "-2"], "error: --count: must be at least 1, got -2"),
        (["--count", "1", "--available", "0,8"], "error: --available: GPU 8 is out of range"),
        (["--count", "1", "--available", "0,-1"], "error: --available: GPU -1 is out of range"),
        (["--count", "1", "--available", "3,3"], "error: --available: GPU 3 is listed twice"),
        (["--count", "1", "--available", "a"], "error: --available: 'a' is not a GPU index"),
        (["--count", "1", "--available", ","], "error: --available: no GPU index given"),
    ],
)
def test_cli_rejects_bad_requests(args: list[str], message: str) -> None:
    code, out, err = cli("--matrix", str(VOLTA), *args)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [err.strip()] and err.startswith(message)


def test_cli_rejects_bad_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.json"
    code, _, err = cli("--matrix", str(missing), "--count", "1")
    assert code == 2 and err.strip() == f"error: {missing}: no such file"
    bad = tmp_path / "bad.json"
    bad.write_text("[[0, 1], [1]]")
    code, _, err = cli("--matrix", str(bad), "--count", "1")
    assert code == 2 and err.strip() == f"error: {bad}: bandwidth_gbps: must be square: row 1 has 1 values, expected 2"
    bad.write_text("{oops")
    code, _, err = cli("--matrix", str(bad), "--count", "1")
    assert code == 2 and err.startswith(f"error: {bad}: not valid JSON")
    code, _, err = cli("--matrix", str(tmp_path), "--count", "1")
    assert code == 2 and err.startswith("error: ") and "Traceback" not in err
