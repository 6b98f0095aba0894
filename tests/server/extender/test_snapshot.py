"""The read surface's one snapshot (server/extender/snapshot.py): /ui/occupancy and /inspect are
built at most once per interval, shared by every caller, off the event loop, bounded in waiters and
rows; the verbs never wait for it."""

from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time

from devshare.server.extender.history import History
from devshare.server.extender.serve import Runtime
from devshare.server.extender.snapshot import Body, Busy, ReadSurface
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
    assert all(a is answers[0] for a in answers[:8]) and answers[8] is answers[9]
    assert [n["name"] for n in json.loads(answers[8].raw)["nodes"]] == ["node-0", "node-1", "node-2"]
    assert answers[0].gz is not None and json.loads(gzip.decompress(answers[0].gz)) == json.loads(answers[0].raw)


async def test_at_most_one_build_per_interval_counted_from_the_end_of_the_last() -> None:
    waiting = pod("p", core=50, mem="4Gi")
    waiting["spec"]["schedulerName"] = "devshare-scheduler"  # kept from the watch: listed as pending
    backend = cluster(1, gpus=2, pods=[waiting])
    async with running(backend) as (client, runtime):
        clock = [10.0]
        surface = surface_of(runtime, clock)
        first = json.loads((await surface.occupancy()).raw)
        assert first["queue"]["pending"] == 1 and first["totals"]["gpusUsed"] == 0
        assert await bind(client, "p", "node-0") == ""
        clock[0] += 1.9  # within the interval: the same answer, though the state changed
        assert json.loads((await surface.occupancy()).raw) == first
        clock[0] += 0.2
        second = json.loads((await surface.occupancy()).raw)
        surface.close()
    assert second["totals"]["gpusUsed"] == 0.5 and second["queue"]["pending"] == 0
    assert surface.takes == 2 and surface.builds == 2


async def test_too_many_waiters_are_told_to_retry() -> None:
    async with running(cluster(1, gpus=2)) as (_, runtime):
        surface = surface_of(runtime, [0.0], max_waiting=2)
        out = await asyncio.gather(*[surface.occupancy() for _ in range(3)], return_exceptions=True)
        surface.close()
    assert [type(o) for o in out] == [Body, Body, Busy] and surface.busy == 1
    assert "retry" in str(out[2])


async def test_answers_are_bounded_and_say_so() -> None:
    async with running(cluster(5, gpus=1)) as (_, runtime):
        surface = surface_of(runtime, [0.0], max_nodes=2, max_inspect_nodes=3)
        capped = json.loads((await surface.occupancy()).raw)
        found = json.loads((await surface.occupancy("NODE-4")).raw)
        inspect = json.loads((await surface.inspect()).raw)
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
        assert json.loads((await page).raw)["totals"]["nodes"] == 2
        surface.close()


async def test_the_interval_grows_with_what_a_snapshot_costs() -> None:
    """The builder rests at least REST times as long as its last snapshot took."""
    async with running(cluster(1, gpus=1)) as (_, runtime):
        clock = [0.0]
        surface = surface_of(runtime, clock)
        def slow(taken: object) -> Body:
            clock[0] += 3.0
            return Body(b"{}")

        await surface._get("slow", slow)  # type: ignore[arg-type]
        assert surface.last_seconds == 3.0
        clock[0] += 11.9  # REST x 3 s = 12 s: still fresh
        assert surface._current().generation == 1
        clock[0] += 0.2
        assert surface._current().generation == 2
        surface.close()


async def test_a_client_that_accepts_gzip_gets_it() -> None:
    async with running(cluster(2, gpus=2)) as (client, _):
        for path in ("/inspect", "/ui/occupancy"):
            r = await client.get(path, headers={"Accept-Encoding": "gzip"})
            assert r.status == 200 and r.headers["Content-Encoding"] == "gzip", path
            assert len((await r.json())["nodes"]) == 2  # the client decompresses it
            r = await client.get(path, headers={"Accept-Encoding": "identity"})
            assert "Content-Encoding" not in r.headers and len((await r.json())["nodes"]) == 2


async def test_inspect_holds_every_change_made_before_it_the_page_may_lag() -> None:
    """A script that binds, then inspects, sees its bind (README's try-it block); the page's answer
    may be up to one interval old."""
    waiting = pod("p", core=50, mem="4Gi")
    async with running(cluster(1, gpus=2, pods=[waiting])) as (client, runtime):
        clock = [0.0]
        surface = surface_of(runtime, clock)
        before = json.loads((await surface.inspect()).raw)
        page = json.loads((await surface.occupancy()).raw)
        assert await bind(client, "p", "node-0") == ""
        clock[0] += 0.5  # within the interval
        assert json.loads((await surface.occupancy()).raw) == page  # the page: the same snapshot
        after = json.loads((await surface.inspect()).raw)
        assert json.loads((await surface.occupancy()).raw) != page  # the page shares the new copy
        again = await surface.inspect()  # nothing changed since: no new copy
        surface.close()
    holders = [sorted(p for d in n["devices"] for p in d["pods"]) for n in before["nodes"] + after["nodes"]]
    assert holders == [[], ["default/p/main"]]
    assert surface.takes == 2 and json.loads(again.raw) == after


async def test_inspect_after_a_change_waits_for_the_builder_to_rest() -> None:
    """After a build that took d seconds the next copy waits REST x d: an /inspect after a change waits
    for it (and for a build in flight) rather than answer from before the change."""
    waiting = pod("p", core=50, mem="4Gi")
    async with running(cluster(1, gpus=2, pods=[waiting])) as (client, runtime):
        surface = ReadSurface(runtime.extender, History(runtime.state, time.time), {}, interval=60.0)

        def slow(taken: object) -> Body:
            time.sleep(0.05)  # a build of 50 ms: the builder then rests 200 ms
            return Body(b"{}")

        await surface._get("slow", slow)  # type: ignore[arg-type]
        assert await bind(client, "p", "node-0") == ""
        after = json.loads((await surface.inspect()).raw)
        surface.close()
    assert surface.takes == 2
    assert [p for d in after["nodes"][0]["devices"] for p in d["pods"]] == ["default/p/main"]
