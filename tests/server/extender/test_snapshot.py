"""The read surface's one snapshot (server/extender/snapshot.py): /ui/occupancy and /inspect are
built at most once per interval, shared by every caller, off the event loop, bounded in waiters and
rows; the verbs never wait for it."""

from __future__ import annotations

import asyncio
import json
import threading
import time

from devshare.server.extender.history import History
from devshare.server.extender.serve import Runtime
from devshare.server.extender.snapshot import Busy, ReadSurface
from support.extender import bind, cluster, names_body, pod, post, running


def surface_of(runtime: Runtime, clock: list[float], **kw: int) -> ReadSurface:
    return ReadSurface(runtime.extender, History(runtime.state, time.time), {"policy": "devshare"},
                       clock=lambda: clock[0], interval=2.0, **kw)


async def test_concurrent_callers_share_one_copy_and_one_build_each() -> None:
    async with running(cluster(3, gpus=2)) as (_, runtime):
        clock = [0.0]
        surface = surface_of(runtime, clock)
        answers = await asyncio.gather(*[surface.occupancy() for _ in range(8)], surface.inspect(), surface.inspect())
        surface.close()
    assert surface.takes == 1 and surface.builds == 2  # one copy; one occupancy and one inspect build
    assert len(set(answers[:8])) == 1 and answers[8] == answers[9]
    assert [n["name"] for n in json.loads(answers[8])["nodes"]] == ["node-0", "node-1", "node-2"]


async def test_at_most_one_build_per_interval_counted_from_the_end_of_the_last() -> None:
    waiting = pod("p", core=50, mem="4Gi")
    waiting["spec"]["schedulerName"] = "devshare-scheduler"  # kept from the watch: listed as pending
    backend = cluster(1, gpus=2, pods=[waiting])
    async with running(backend) as (client, runtime):
        clock = [10.0]
        surface = surface_of(runtime, clock)
        first = json.loads(await surface.occupancy())
        assert first["queue"]["pending"] == 1 and first["totals"]["gpusUsed"] == 0
        assert await bind(client, "p", "node-0") == ""
        clock[0] += 1.9  # within the interval: the same answer, though the state changed
        assert json.loads(await surface.occupancy()) == first
        clock[0] += 0.2
        second = json.loads(await surface.occupancy())
        surface.close()
    assert second["totals"]["gpusUsed"] == 0.5 and second["queue"]["pending"] == 0
    assert surface.takes == 2 and surface.builds == 2


async def test_too_many_waiters_are_told_to_retry() -> None:
    async with running(cluster(1, gpus=2)) as (_, runtime):
        surface = surface_of(runtime, [0.0], max_waiting=2)
        out = await asyncio.gather(*[surface.occupancy() for _ in range(3)], return_exceptions=True)
        surface.close()
    assert [type(o) for o in out] == [bytes, bytes, Busy] and surface.busy == 1
    assert "retry" in str(out[2])


async def test_answers_are_bounded_and_say_so() -> None:
    async with running(cluster(5, gpus=1)) as (_, runtime):
        surface = surface_of(runtime, [0.0], max_nodes=2, max_inspect_nodes=3)
        capped = json.loads(await surface.occupancy())
        found = json.loads(await surface.occupancy("NODE-4"))
        inspect = json.loads(await surface.inspect())
        surface.close()
    assert [n["name"] for n in capped["nodes"]] == ["node-0", "node-1"]
    assert (capped["shown"], capped["matched"], capped["maxNodes"]) == (2, 5, 2)
    assert capped["totals"]["nodes"] == 5  # the totals cover every node
    assert [n["name"] for n in found["nodes"]] == ["node-4"] and found["matched"] == 1
    assert len(inspect["nodes"]) == 3 and inspect["truncated"] == {"nodes": 5, "shown": 3}


async def test_the_verbs_never_wait_for_a_build() -> None:
    """While the read surface's worker is held, a page's request waits; a filter is answered."""
    async with running(cluster(2, gpus=2)) as (client, runtime):
        surface = surface_of(runtime, [0.0])
        gate = threading.Event()
        surface._pool.submit(gate.wait)  # the one worker, busy
        page = asyncio.ensure_future(surface.occupancy())
        await asyncio.sleep(0)
        out = await post(client, "/filter", names_body(pod("p", core=50), ["node-0", "node-1"]))
        assert sorted(out["NodeNames"]) == ["node-0", "node-1"]
        assert not page.done()
        gate.set()
        assert json.loads(await page)["totals"]["nodes"] == 2
        surface.close()
