"""``--save`` (the in-memory backend's persistence, issue 12): a write that fails part-way never
leaves a truncated file, a bind that happened is never answered 500, the write runs off the event
loop, and binds are coalesced into few writes rather than one full rewrite each."""

from __future__ import annotations

import asyncio
import builtins
import errno
import io
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devshare.kube.memory import MemoryBackend
from devshare.server.extender.serve import ExtenderOptions, cluster_saver
from support.extender import cluster, pod, running
from support.waiting import FAILSAFE, eventually, settled


async def bind(client: Any, name: str, node: str = "node-0") -> tuple[int, str]:
    body = {"PodName": name, "PodNamespace": "default", "PodUID": f"uid-default-{name}", "Node": node}
    r = await client.post("/bind", json=body)
    return r.status, (await r.json()).get("Error", "")


class DiskFull:
    """Writes to files under ``root`` fail with ENOSPC after ``room`` bytes, while ``full``."""

    def __init__(self, root: Path, room: int = 4096) -> None:
        self.root = str(root)
        self.room = room
        self.full = True


class _Filling:
    def __init__(self, f: Any, disk: DiskFull) -> None:
        self._f = f
        self._disk = disk
        self._written = 0

    def write(self, data: Any) -> int:
        if self._disk.full and self._written + len(data) > self._disk.room:
            part = data[: self._disk.room - self._written]
            self._f.write(part)
            self._f.flush()
            self._written += len(part)
            raise OSError(errno.ENOSPC, "No space left on device")
        self._written += len(data)
        return int(self._f.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __enter__(self) -> _Filling:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[DiskFull]:
    d = DiskFull(tmp_path)
    real_open = builtins.open

    def fake_open(file: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
        name = os.readlink(f"/proc/self/fd/{file}") if isinstance(file, int) else str(file)
        f = real_open(file, mode, *args, **kw)
        if any(c in mode for c in "wax+") and name.startswith(d.root):
            return _Filling(f, d)
        return f

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)
    yield d


def pods(n: int) -> list[dict[str, Any]]:
    return [pod(f"p{i}", core=10) for i in range(n)]


async def test_disk_full_keeps_the_previous_file_and_the_bind_says_it_is_not_saved(tmp_path: Path,
                                                                                   disk: DiskFull) -> None:
    backend = cluster(1, gpus=4, pods=pods(40))
    out = tmp_path / "saved.yaml"
    disk.full = False
    backend.save(out)  # a good file from before
    before = out.read_bytes()
    disk.full = True
    saver = cluster_saver(backend, out)
    async with running(backend, ExtenderOptions(save=saver)) as (client, _):
        status, error = await bind(client, "p0")  # never a 500, and never a bind acknowledged but not on disk
        assert status == 200 and "bound to node node-0 in memory but not saved to the cluster file" in error
        assert "No space" in error
        assert out.read_bytes() == before  # whole, untouched: the write went to a temporary file
        assert saver.failures >= 1 and saver.last_error is not None and "No space" in saver.last_error
        metrics = await (await client.get("/metrics")).text()
        assert "devshare_extender_save_failures_total" in metrics
        assert [p.name for p in tmp_path.iterdir()] == ["saved.yaml"]  # no temporary file left behind
        disk.full = False  # space freed: the next bind's write goes through
        assert await bind(client, "p1") == (200, "")
    saved = MemoryBackend.load(out)
    bound = {k for k, p in saved.store.objects["pods"].items() if p["spec"].get("nodeName")}
    assert bound == {"default/p0", "default/p1"}


async def test_the_write_runs_off_the_event_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a write is stuck (a slow disk), the extender keeps answering probes; the bind waiting for it
    is answered once it is on disk."""
    backend = cluster(1, gpus=4, pods=pods(3))
    out = tmp_path / "saved.yaml"
    stuck, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        stuck.set()
        release.wait(30)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    saver = cluster_saver(backend, out)
    async with running(backend, ExtenderOptions(save=saver)) as (client, _):
        first = asyncio.create_task(bind(client, "p0"))
        await asyncio.get_running_loop().run_in_executor(None, stuck.wait, FAILSAFE)
        assert stuck.is_set() and not first.done()  # not answered before it is on disk
        # a hang guard, not a timing assertion: on the loop, the stuck write would block these forever
        assert (await settled(client.get("/healthz"))).status == 200
        second = asyncio.create_task(bind(client, "p1"))  # waits for the next write
        release.set()
        assert await settled(first) == (200, "") and await settled(second) == (200, "")
    objs = [d for d in yaml.safe_load_all(out.read_text()) if d]
    assert {o["metadata"]["name"] for o in objs if o["kind"] == "Pod" and o["spec"].get("nodeName")} == {"p0", "p1"}


async def test_binds_that_come_together_share_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Group commit: the binds that arrive while a write is on its way wait together for the next one."""
    backend = cluster(2, gpus=4, pods=pods(30))
    out = tmp_path / "saved.yaml"
    replaced: list[str] = []
    stuck, release = threading.Event(), threading.Event()
    real_replace = os.replace

    def held_replace(src: Any, dst: Any) -> None:
        replaced.append(str(dst))
        stuck.set()
        release.wait(FAILSAFE)
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", held_replace)
    saver = cluster_saver(backend, out)
    async with running(backend, ExtenderOptions(save=saver)) as (client, _):
        first = asyncio.create_task(bind(client, "p0", "node-0"))
        await asyncio.get_running_loop().run_in_executor(None, stuck.wait, FAILSAFE)
        rest = [asyncio.create_task(bind(client, f"p{i}", f"node-{i % 2}")) for i in range(1, 30)]
        await eventually(lambda: len(saver._waiting) == 29, what="29 binds waiting for the next write")
        release.set()
        assert [await settled(b) for b in [first, *rest]] == [(200, "")] * 30
        assert len(replaced) == 2  # p0's write, then one for the 29 that came while it was on its way
    assert len(replaced) == 3  # and one at shutdown
    saved = MemoryBackend.load(out)
    assert sum(1 for p in saved.store.objects["pods"].values() if p["spec"].get("nodeName")) == 30


async def test_once_synced_the_objects_are_frozen_and_full_collections_made_rare() -> None:
    """The server process (freeze_after_sync): the cluster's objects leave the collector's walks, and
    full collections no longer run every ten middle ones (serve.GC_THRESHOLDS)."""
    import gc

    from devshare.server.extender.serve import GC_THRESHOLDS

    before = gc.get_threshold()
    assert GC_THRESHOLDS[0] > 700 and GC_THRESHOLDS[2] > 10  # rarer than Python's own (700, 10, 10)
    try:
        async with running(cluster(), ExtenderOptions(freeze_after_sync=True)) as (client, _):
            await eventually(lambda: gc.get_threshold() == GC_THRESHOLDS)
            assert gc.get_threshold() == GC_THRESHOLDS
            assert gc.get_freeze_count() > 0
            assert (await client.get("/readyz")).status == 200
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
