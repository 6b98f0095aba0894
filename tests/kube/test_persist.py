"""Saving the in-memory backend's objects (kube/persist.py): one JSON document per object that loads as
YAML, a file replaced whole or not at all, and commits that share writes and are answered once on disk.
Through the extender's binds (disk full, a write stuck off the loop, group commit under load):
tests/server/extender/test_serve.py."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from devshare.kube.persist import SnapshotWriter, encode_documents, write_atomic
from support.waiting import settled


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "x"}]}}


def loaded(path: Path) -> list[Any]:
    return list(yaml.safe_load_all(path.read_text()))


def test_one_document_a_line() -> None:
    assert encode_documents([{"a": 1}, {"b": "x/y"}]) == b'---\n{"a":1}\n---\n{"b":"x/y"}\n'
    assert encode_documents([]) == b""


def test_write_atomic_replaces_the_file(tmp_path: Path) -> None:
    out = tmp_path / "cluster.yaml"
    out.write_text("old")
    write_atomic(out, b"new")
    assert out.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.yaml"]  # no temporary file left


def test_a_failed_write_leaves_nothing_behind(tmp_path: Path) -> None:
    """The rename fails (the path is a directory): the error is raised, the temporary file removed, and
    what was there is untouched."""
    out = tmp_path / "cluster.yaml"
    out.mkdir()
    (out / "keep").write_text("kept")
    with pytest.raises(IsADirectoryError):
        write_atomic(out, b"new")
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.yaml"] and (out / "keep").read_text() == "kept"
    with pytest.raises(FileNotFoundError):  # no directory to put it in
        write_atomic(tmp_path / "missing" / "cluster.yaml", b"new")


class Objects:
    """The objects a writer saves, and how often it took a snapshot of them."""

    def __init__(self, *names: str) -> None:
        self.objects = [pod(n) for n in names]
        self.snapshots = 0
        self.on_snapshot: Any = None

    def snapshot(self) -> list[dict[str, Any]]:
        self.snapshots += 1
        taken = list(self.objects)
        if self.on_snapshot is not None:
            hook, self.on_snapshot = self.on_snapshot, None
            hook()
        return taken


def names(path: Path) -> list[str]:
    return [d["metadata"]["name"] for d in loaded(path)]


async def test_commit_returns_once_the_objects_are_on_disk(tmp_path: Path) -> None:
    objs = Objects("a", "b")
    writer = SnapshotWriter(objs.snapshot, tmp_path / "cluster.yaml")
    assert await settled(writer.commit()) is None
    assert names(tmp_path / "cluster.yaml") == ["a", "b"] and writer.writes == 1
    objs.objects.append(pod("c"))
    assert await settled(writer.commit()) is None
    assert names(tmp_path / "cluster.yaml") == ["a", "b", "c"] and writer.writes == 2


async def test_commits_that_come_together_share_one_write(tmp_path: Path) -> None:
    objs = Objects("a")
    writer = SnapshotWriter(objs.snapshot, tmp_path / "cluster.yaml")
    assert await settled(asyncio.gather(*(writer.commit() for _ in range(20)))) == [None] * 20
    assert writer.writes == 1 and objs.snapshots == 1


async def test_a_commit_made_during_a_write_waits_for_the_next_one(tmp_path: Path) -> None:
    """A change made after the snapshot of a write began is not in that write: its commit is answered by
    the next write, whose snapshot holds it."""
    objs = Objects("a")
    writer = SnapshotWriter(objs.snapshot, tmp_path / "cluster.yaml")
    later: list[asyncio.Task[str | None]] = []

    def change_after_the_snapshot() -> None:
        objs.objects.append(pod("b"))
        later.append(asyncio.ensure_future(writer.commit()))

    objs.on_snapshot = change_after_the_snapshot
    assert await settled(writer.commit()) is None
    assert await settled(later[0]) is None
    assert names(tmp_path / "cluster.yaml") == ["a", "b"]
    assert writer.writes == 2 and objs.snapshots == 2


async def test_a_caller_that_goes_away_does_not_stop_the_write(tmp_path: Path) -> None:
    objs = Objects("a")
    writer = SnapshotWriter(objs.snapshot, tmp_path / "cluster.yaml")
    gone = asyncio.ensure_future(writer.commit())
    stays = asyncio.ensure_future(writer.commit())
    await asyncio.sleep(0)  # both waiting for the write
    gone.cancel()
    assert await settled(stays) is None
    assert gone.cancelled() and names(tmp_path / "cluster.yaml") == ["a"]


async def test_a_failed_write_is_answered_with_why_counted_and_tried_again(tmp_path: Path,
                                                                          caplog: pytest.LogCaptureFixture) -> None:
    out = tmp_path / "cluster.yaml"
    out.mkdir()  # the rename over it fails
    objs = Objects("a")
    writer = SnapshotWriter(objs.snapshot, out)
    with caplog.at_level(logging.INFO, logger="devshare.kube.persist"):
        why = await settled(writer.commit())
        assert why == "IsADirectoryError: Is a directory"  # not the temporary file's random name
        assert writer.failures == 1 and writer.writes == 0 and writer.last_error == why
        assert await settled(writer.commit()) == why  # the same failure: counted, logged once
        assert writer.failures == 2
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert warnings[0].startswith(f"could not save the cluster to {out} (the previous file is kept): ")
        out.rmdir()  # the way is clear: the next commit writes, and says so
        assert await settled(writer.commit()) is None
    assert names(out) == ["a"] and writer.writes == 1 and writer.last_error is None
    assert any(r.getMessage() == f"saved the cluster to {out} again" for r in caplog.records)
    assert [p.name for p in tmp_path.iterdir()] == ["cluster.yaml"]  # no temporary file of the failures


async def test_close_writes_once_more_after_any_write_on_its_way(tmp_path: Path) -> None:
    objs = Objects("a")
    writer = SnapshotWriter(objs.snapshot, tmp_path / "cluster.yaml")
    pending = asyncio.ensure_future(writer.commit())
    await asyncio.sleep(0)
    objs.objects.append(pod("b"))  # changed with no commit: close saves it
    await settled(writer.close())
    assert pending.done() and pending.result() is None
    assert names(tmp_path / "cluster.yaml") == ["a", "b"] and writer.writes == 2


async def test_close_after_nothing_still_saves(tmp_path: Path) -> None:
    writer = SnapshotWriter(Objects("a").snapshot, tmp_path / "cluster.yaml")
    await settled(writer.idle())  # nothing pending: returns
    await settled(writer.close())
    assert names(tmp_path / "cluster.yaml") == ["a"]
