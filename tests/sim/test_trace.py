from __future__ import annotations

from pathlib import Path

import pytest

from devshare.model.errors import InvalidInput
from devshare.sim.trace import load_trace
from support.trace import NODES, PODS_HEADER


def test_loads_small_trace(small_trace: tuple[Path, Path]) -> None:
    tr = load_trace(*small_trace)
    assert tr.name == "openb_pod_list_small"
    assert len(tr.nodes) == 5 and len(tr.pods) == 20
    assert tr.gpu_capacity == 17 * 1000
    assert tr.pods[5].gpu_spec == ("G2", "V100")


def _pods(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "pods.csv"
    p.write_text(PODS_HEADER + body)
    return p


def _nodes(tmp_path: Path) -> Path:
    p = tmp_path / "nodes.csv"
    p.write_text(NODES)
    return p


@pytest.mark.parametrize(("body", "words"), [
    ("a,1000,1024,1,500,,LS,Running,0,0,0\nb,1000,1024\n", ["line 3", "truncated"]),
    ("a,1000,1024,1,five,,LS,Running,0,0,0\n", ["line 2", "gpu_milli", "integer"]),
    ("a,-1000,1024,1,500,,LS,Running,0,0,0\n", ["line 2", "cpu_milli", ">= 0"]),
    ("a,1000,1024,1,500,A100,LS,Running,0,0,0\n", ["line 2", "unknown GPU model", "A100"]),
    ("a,1000,1024,2,500,,LS,Running,0,0,0\n", ["line 2", "single GPU"]),
    ("a,1000,1024,1,1500,,LS,Running,0,0,0\n", ["line 2", "between 0 and 1000"]),
])
def test_bad_pod_lines_name_file_and_line(tmp_path: Path, body: str, words: list[str]) -> None:
    pods = _pods(tmp_path, body)
    with pytest.raises(InvalidInput) as e:
        load_trace(_nodes(tmp_path), pods)
    msg = str(e.value)
    assert str(pods) in msg
    for w in words:
        assert w in msg


def test_missing_column_and_empty_file(tmp_path: Path) -> None:
    bad = tmp_path / "nodes.csv"
    bad.write_text("sn,cpu_milli,gpu\nx,1,1\n")
    with pytest.raises(InvalidInput, match="line 1: header lacks column"):
        load_trace(bad, _pods(tmp_path, "a,1,1,0,0,,LS,Running,0,0,0\n"))
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(InvalidInput, match="empty file"):
        load_trace(_nodes(tmp_path), empty)
