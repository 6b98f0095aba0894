"""The agent's own checkpoint: handouts and owed writes survive a restart; a broken file is ignored."""

from __future__ import annotations

from pathlib import Path

from devshare.agent.journal import MARK, Handout, Journal, Write


def test_round_trip_and_what_is_worth_a_write(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "agent-checkpoint.json"
    j = Journal(path)
    assert j.handouts == [] and j.writes == []
    j.writes.append(Write(uid="u1", namespace="ns", name="p", annotations={"devshare.io/assigned": "true"}, why=MARK))
    j.save()
    # the first save writes; a mark alone is not worth another write
    assert path.exists()
    before = path.stat().st_mtime_ns, path.read_bytes()
    j.writes.append(Write(uid="u2", namespace="ns", name="q", annotations={"devshare.io/assigned": "true"}, why=MARK))
    j.save()
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before
    j.handouts.append(Handout(resource="koordinator.sh/gpu-core", ids=("0-1", "0-2"), standin="u1", container="c",
                              at=1.5))
    j.writes.append(Write(uid="u3", namespace="ns", name="r", annotations={"devshare.io/allocation": "{}",
                                                                          "gone": None}, why="trade with ns/s"))
    j.save()
    again = Journal(path)
    assert again.handouts == j.handouts
    assert again.writes == j.writes  # the marks too, when saved with something else
    assert not list(path.parent.glob(".agent-checkpoint-*"))  # no temporary file left behind


def test_a_broken_or_foreign_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "agent-checkpoint.json"
    path.write_text("{not json")
    assert Journal(path).handouts == []
    path.write_text('{"version": 99, "handouts": [], "writes": []}')
    assert Journal(path).writes == []
    memory = Journal(None)
    memory.handouts.append(Handout(resource="r", ids=(), standin="u", container="c", at=0.0))
    memory.save()  # memory only: nothing to write
