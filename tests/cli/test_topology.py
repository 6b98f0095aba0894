"""``devshare topology`` (:mod:`devshare.cli.topology`): the ``--available`` list it reads and the set it
prints. The command's end-to-end cases and error lines are in ``tests/engine/test_topology.py``
("devshare topology" section), beside the search they exercise."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from devshare.cli.main import app
from devshare.cli.topology import parse_available
from devshare.model.errors import InvalidInput
from support import REPO

VOLTA = REPO / "examples" / "topologies" / "dgx1-volta.json"
RUNNER = CliRunner()


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
