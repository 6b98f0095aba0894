"""StateSync: list, watch, resume, re-list on 410, reconnect, restart recovery."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from devshare.engine.state import ClusterState
from devshare.kube.backend import Backend, Kind, WatchEvent
from devshare.kube.live import LiveBackend
from devshare.kube.memory import MemoryBackend
from devshare.kube.sync import Backoff, StateSync
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.codecs import encode_canonical
from devshare.model.pod import parse_pod, pod_node_requests
from fakeapi.server import FakeApiServer
from support.kube import GiB, device, node, plain_pod, pod


def fast_backoff() -> Backoff:
    return Backoff(initial=0.01, maximum=0.05)


@dataclass
class World:
    """A backend plus a way to change the cluster behind the sync's back."""

    backend: Backend
    put: Callable[[dict[str, Any]], Any]
    delete: Callable[[Kind, str], Any]


@pytest.fixture(params=["memory", "live"])
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[World]:
    if request.param == "memory":
        mb = MemoryBackend()
        yield World(mb, mb.apply, mb.delete)
        return
    server = await FakeApiServer().start()
    backend = LiveBackend.connect(server.write_kubeconfig(tmp_path / "kc"), watch_timeout=30)
    try:
        yield World(backend, server.put, server.delete)
    finally:
        await backend.close()
        await server.stop()


@contextlib.asynccontextmanager
async def syncing(backend: Backend, state: ClusterState | None = None) -> AsyncIterator[StateSync]:
    sync = StateSync(backend, state or ClusterState(), backoff=fast_backoff)
    sync.start()
    try:
        await asyncio.wait_for(sync.synced.wait(), 5)
        yield sync
    finally:
        await sync.stop()


async def eventually(cond: Callable[[], bool], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def used(state: ClusterState, node_name: str, minor: int) -> tuple[float, int]:
    for n in state.inspect()["nodes"]:
        if n["name"] == node_name:
            for d in n["devices"]:
                if d["minor"] == minor:
                    return d["used"]["core"], d["used"]["memory"]
    raise AssertionError(f"no gpu {minor} on {node_name}")


def health(state: ClusterState, node_name: str, minor: int) -> bool:
    n = next(n for n in state.inspect()["nodes"] if n["name"] == node_name)
    return bool(next(d for d in n["devices"] if d["minor"] == minor)["health"])


def seed(world: World) -> None:
    for n in ("n1", "n2"):
        world.put(node(n))
        world.put(device(n))
    world.put(pod("a", node_name="n1", grants=[(0, 50, 8)]))
    world.put(pod("b", node_name="n1", grants=[(0, 30, 4)], ns="team"))
    world.put(pod("c", node_name="n2", grants=[(1, 100, 16)], core=100, memory_gib=16))
    world.put(pod("pending"))
    world.put(pod("done", node_name="n2", grants=[(2, 50, 8)], phase="Succeeded"))
    world.put(pod("plain", node_name="n2"))  # bound without devshare: not ours


async def test_sync_from_list(world: World) -> None:
    seed(world)
    async with syncing(world.backend) as sync:
        state = sync.state
        assert sync.is_synced
        assert sorted(state.pods) == ["default/a", "default/c", "team/b"]
        assert all(r.phase == "bound" for r in state.pods.values())
        assert used(state, "n1", 0) == (80.0, 12 * GiB)
        assert used(state, "n2", 1) == (100.0, 16 * GiB)
        assert used(state, "n2", 2) == (0.0, 0)
        assert sync.malformed == 0


async def test_watch_events_update_the_state(world: World) -> None:
    seed(world)
    async with syncing(world.backend) as sync:
        state = sync.state
        world.put(pod("d", node_name="n2", grants=[(3, 20, 2)]))
        await eventually(lambda: "default/d" in state.pods)
        assert used(state, "n2", 3) == (20.0, 2 * GiB)

        world.put(pod("d", node_name="n2", grants=[(3, 20, 2)], phase="Failed"))
        await eventually(lambda: "default/d" not in state.pods)
        assert used(state, "n2", 3) == (0.0, 0)

        world.delete("pods", "team/b")
        await eventually(lambda: "team/b" not in state.pods)
        assert used(state, "n1", 0) == (50.0, 8 * GiB)

        # device health change takes effect at once
        world.put(device("n1", unhealthy=[2]))
        await eventually(lambda: not health(state, "n1", 2))
        assert health(state, "n1", 0)

        # Device deleted: the node has no devices; pods keep their records
        world.delete("devices", "n2")
        await eventually(lambda: "n2" not in state.devices)
        assert "default/c" in state.pods


async def test_node_deletion_keeps_pod_records(world: World) -> None:
    seed(world)
    async with syncing(world.backend) as sync:
        state = sync.state
        before = state.usage_key()
        world.delete("nodes", "n2")
        await eventually(lambda: "n2" not in state.nodes)
        assert "default/c" in state.pods  # never freed silently
        world.put(node("n2"))
        await eventually(lambda: "n2" in state.nodes)
        assert state.usage_key() == before


async def test_malformed_annotations_are_counted_not_fatal(world: World) -> None:
    world.put(node("n1"))
    world.put(device("n1"))
    world.put(pod("bad", node_name="n1", annotations={"devshare.io/allocation": "{not json"}))
    world.put(pod("elsewhere", node_name="n1", grants=[(0, 10, 1)]))
    async with syncing(world.backend) as sync:
        assert sync.malformed == 1
        assert "default/elsewhere" in sync.state.pods
        wrong = pod("moved", node_name="n1", grants=[(0, 10, 1)])
        wrong["spec"]["nodeName"] = "n9"  # the allocation names another node
        world.put(wrong)
        await eventually(lambda: sync.malformed == 2)
        assert "default/moved" not in sync.state.pods


async def test_sync_waits_until_the_api_answers(fake_api: FakeApiServer, live_backend: LiveBackend) -> None:
    fake_api.put(node("n1"))
    fake_api.fail_next("list", "nodes", times=3, code=503)
    fake_api.fail_next("list", "pods", times=1, code=0)
    sync = StateSync(live_backend, ClusterState(), backoff=fast_backoff)
    sync.start()
    try:
        assert not sync.is_synced
        await asyncio.wait_for(sync.synced.wait(), 5)
        assert "n1" in sync.state.nodes
        assert fake_api.count("list", "nodes") == 4
    finally:
        await sync.stop()


def pod_watches(fake_api: FakeApiServer) -> list[dict[str, str]]:
    return [q for m, p, q in fake_api.requests if p == "/api/v1/pods" and q.get("watch") == "true"]


async def test_watch_resumes_from_the_last_version_after_a_dropped_connection(
    fake_api: FakeApiServer, live_backend: LiveBackend
) -> None:
    seed(fake_api)  # type: ignore[arg-type]
    async with syncing(live_backend) as sync:
        listed_rv = sync.resource_versions["pods"]
        await eventually(lambda: len(pod_watches(fake_api)) == 1)
        assert pod_watches(fake_api)[0]["resourceVersion"] == listed_rv

        added = fake_api.put(pod("d", node_name="n2", grants=[(3, 20, 2)]))
        await eventually(lambda: "default/d" in sync.state.pods)
        last_rv = added["metadata"]["resourceVersion"]
        await eventually(lambda: sync.resource_versions["pods"] == last_rv)

        fake_api.fail_next("watch", "pods", times=2, code=503)
        assert fake_api.drop_watches() == 3
        fake_api.put(pod("e", node_name="n2", grants=[(3, 20, 2)]))  # happens while disconnected
        await eventually(lambda: "default/e" in sync.state.pods)
        assert sync.reconnects >= 3
        assert sync.relists == 0
        assert fake_api.count("list", "pods") == 1  # resumed, never re-listed
        assert all(q["resourceVersion"] == last_rv for q in pod_watches(fake_api)[1:])
        assert used(sync.state, "n2", 3) == (40.0, 4 * GiB)


@pytest.mark.parametrize("gone_as_http", [False, True])
async def test_relist_on_410_reconciles_and_keeps_assumed_pods(
    fake_api: FakeApiServer, live_backend: LiveBackend, gone_as_http: bool
) -> None:
    fake_api.gone_as_http = gone_as_http
    seed(fake_api)  # type: ignore[arg-type]
    async with syncing(live_backend) as sync:
        state = sync.state
        # a bind in flight: reserved by the scheduler, not yet visible as bound
        inflight = parse_pod(pod("pending"))
        alloc = PodAllocation(node="n2", containers=(
            ContainerAllocation(name="main", devices=(DeviceGrant(type="gpu", minor=0, core_milli=500,
                                                                  memory=8 * GiB),)),))
        state.assume(inflight, alloc, now=0.0, ttl=None)
        # one kube-scheduler knows before our watch does (created after our list)
        ghost = parse_pod(pod("ghost", core=10, memory_gib=1))
        state.assume(ghost, PodAllocation(node="n2", containers=(ContainerAllocation(name="main", devices=(
            DeviceGrant(type="gpu", minor=0, core_milli=100, memory=GiB),)),)), now=0.0, ttl=None)

        for plural in ("nodes", "pods", "devices"):
            fake_api.fail_next("watch", plural, times=1000, code=503)
        fake_api.drop_watches()
        # changes the watches never see: history is compacted behind them
        fake_api.delete("pods", "default/a")
        fake_api.delete("nodes", "n1")
        fake_api.delete("devices", "n1")
        fake_api.put(pod("new", node_name="n2", grants=[(3, 10, 1)]))
        fake_api.compact()
        fake_api.clear_failures()

        await eventually(lambda: sync.relists >= 3)
        await eventually(lambda: "default/new" in state.pods and "default/a" not in state.pods)
        assert "n1" not in state.nodes and "n1" not in state.devices
        assert "team/b" in state.pods  # on a removed node, but not deleted
        assert state.pods["default/pending"].phase == "assumed"
        assert state.pods["default/ghost"].phase == "assumed"
        assert used(state, "n2", 0) == (60.0, 9 * GiB)
        assert fake_api.count("list", "pods") == 2


async def test_expired_watch_event_triggers_relist(fake_api: FakeApiServer, live_backend: LiveBackend) -> None:
    seed(fake_api)  # type: ignore[arg-type]
    async with syncing(live_backend) as sync:
        await eventually(lambda: fake_api.watch_count() == 3)
        fake_api.expire_watches()
        await eventually(lambda: sync.relists == 3)
        fake_api.put(pod("late", node_name="n1", grants=[(1, 10, 1)]))
        await eventually(lambda: "default/late" in sync.state.pods)


async def test_bookmarks_advance_the_version(fake_api: FakeApiServer, live_backend: LiveBackend) -> None:
    fake_api.put(node("n1"))
    async with syncing(live_backend) as sync:
        await eventually(lambda: fake_api.watch_count() == 3)
        fake_api.put(pod("x"))  # a pod event moves the global version
        await eventually(lambda: sync.resource_versions["pods"] == str(fake_api.store.rv))
        before = sync.events
        fake_api.send_bookmarks()
        await eventually(lambda: sync.resource_versions["nodes"] == str(fake_api.store.rv))
        assert sync.events == before


async def bind_through(backend: Backend, state: ClusterState, obj: dict[str, Any], node_name: str,
                       grants: list[tuple[int, int, int]]) -> None:
    """What the extender does: reserve, annotate, bind, mark bound."""
    req = parse_pod(obj)
    alloc = PodAllocation(node=node_name, containers=(ContainerAllocation(name="main", devices=tuple(
        DeviceGrant(type="gpu", minor=m, id=f"GPU-{node_name}-{m}", core_milli=c * 10, memory=g * GiB)
        for m, c, g in grants)),))
    state.assume(req, alloc, now=0.0)
    await backend.patch_pod_annotations(req.namespace, req.name, encode_canonical(alloc))
    await backend.bind_pod(req.namespace, req.name, node_name)
    state.bind(req.key)


async def test_restart_rebuilds_the_same_usage(world: World) -> None:
    seed(world)
    world.put(pod("p1", ns="team"))
    world.put(pod("p2", core=100, memory_gib=16))
    async with syncing(world.backend) as first:
        await bind_through(world.backend, first.state, pod("p1", ns="team"), "n1", [(1, 50, 8)])
        await bind_through(world.backend, first.state, pod("p2", core=100, memory_gib=16), "n2",
                           [(0, 100, 16)])
        await eventually(lambda: first.events >= 4)  # the patches and binds came back through the watch
        await asyncio.sleep(0.05)
        live = first.state.usage_key()
        live_pods = {k: (r.allocation, r.phase) for k, r in first.state.pods.items()}

    async with syncing(world.backend) as second:  # a restart: a fresh state over the same cluster
        assert second.state.usage_key() == live
        assert {k: (r.allocation, r.phase) for k, r in second.state.pods.items()} == live_pods
        assert second.overbooked == 0
        # events about pods it already holds never count them twice
        world.put({**pod("p2", core=100, memory_gib=16, node_name="n2", grants=[(0, 100, 16)]),
                   "status": {"phase": "Running"}})
        await eventually(lambda: second.events >= 1)
        await asyncio.sleep(0.05)
        assert second.state.usage_key() == live


# --------------------------------------------------------------------------- property
ops = st.lists(
    st.tuples(st.sampled_from(["bind", "plain", "delete", "finish", "touch", "device"]), st.integers(0, 5),
              st.sampled_from(["n1", "n2"]), st.integers(0, 3), st.integers(1, 60)),
    max_size=30,
)


@settings(max_examples=80, deadline=None)
@given(ops)
# a pod refused for over-booking is counted once the pod before it leaves (it runs on that card)
@example([("bind", 0, "n1", 0, 60), ("bind", 1, "n1", 0, 60), ("delete", 0, "n1", 0, 1)])
# a counted pod's allocation changes into over-booking: the pod that got the node first keeps the card
@example([("bind", 0, "n1", 0, 1), ("bind", 1, "n1", 0, 52), ("bind", 0, "n1", 0, 49)])
# a counted pod's allocation moves to another node: a pod refused on the node it left is counted there
@example([("bind", 0, "n1", 0, 13), ("bind", 1, "n1", 0, 28), ("bind", 2, "n1", 0, 60), ("bind", 0, "n2", 0, 1)])
def test_incremental_state_equals_a_rebuilt_one(script: list[tuple[str, int, str, int, int]]) -> None:
    """Whatever happens to pods and devices, the state fed by watch events equals the state rebuilt
    from a fresh list (the restart guarantee), and no device usage is negative."""
    mb = MemoryBackend()
    for n in ("n1", "n2"):
        mb.apply(node(n))
        mb.apply(device(n))
    live = StateSync(mb, ClusterState())
    for kind in ("nodes", "devices", "pods"):
        live.reconcile(kind, mb.store.list(kind)[0], initial=True)
    seen = mb.store.rv
    for op, i, n, minor, pct in script:
        name = f"p{i}"
        if op == "bind":
            mb.apply(pod(name, node_name=n, grants=[(minor, pct, 1)], core=pct, memory_gib=1, cpu=f"{pct}m"))
        elif op == "plain" and not mb.store.get("pods", f"default/q{i}"):
            # a pod asking for no device (placed by kube-scheduler, or by any scheduler)
            mb.apply(plain_pod(f"q{i}", node_name=n, cpu=f"{pct * 100}m", memory=f"{minor + 1}Gi"))
        for key in (f"default/{name}", f"default/q{i}") if op in ("delete", "finish", "touch") else ():
            if not mb.store.get("pods", key):
                continue
            if op == "delete":
                mb.delete("pods", key)
            elif op == "finish":
                mb.apply({**mb.store.get("pods", key), "status": {"phase": "Succeeded"}})
            else:
                mb.store.patch("pods", key, {"metadata": {"labels": {"t": str(pct)}}})
        if op == "device":
            mb.apply(device(n, unhealthy=[minor] if pct % 2 else []))
        for kind in ("nodes", "devices", "pods"):
            for ev in mb.store.events_since(kind, seen):
                live.apply_event(kind, WatchEvent(ev.type, ev.object))
        seen = mb.store.rv
    rebuilt = StateSync(mb, ClusterState())
    for kind in ("nodes", "devices", "pods"):
        rebuilt.reconcile(kind, mb.store.list(kind)[0], initial=True)
    assert live.state.usage_key() == rebuilt.state.usage_key()
    assert set(live.state.pods) == set(rebuilt.state.pods)
    # each node's CPU and memory are what kube-scheduler counts: every bound, unfinished pod's requests
    for n in ("n1", "n2"):
        on_node = [o for o in mb.store.list("pods")[0] if o["spec"].get("nodeName") == n
                   and (o.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        row = live.state.row_of[n]
        assert int(live.state.cpu_used[row]) == sum(pod_node_requests(o)[0] for o in on_node)
        assert int(live.state.mem_used[row]) == sum(pod_node_requests(o)[1] for o in on_node)
    for t in live.state.tables.values():
        assert (t.used_core >= 0).all() and (t.used_mem >= 0).all() and (t.used_slots >= 0).all()


async def test_an_object_that_breaks_the_handler_does_not_stop_the_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    import devshare.kube.sync as sync_module

    def exploding(obj: dict[str, Any]) -> Any:
        if obj["metadata"]["name"] == "boom":
            raise RuntimeError("a bug")
        return parse_pod(obj)

    monkeypatch.setattr(sync_module, "parse_pod", exploding)
    mb = MemoryBackend()
    mb.apply(node("n1"))
    mb.apply(device("n1"))
    async with syncing(mb) as sync:
        weird = pod("weird", node_name="n1", grants=[(0, 10, 1)])
        weird["metadata"]["annotations"] = ["not", "a", "mapping"]
        mb.store.put("pods", "default/weird", weird)
        mb.apply(pod("boom", node_name="n1", grants=[(0, 10, 1)]))
        mb.apply(pod("fine", node_name="n1", grants=[(1, 10, 1)]))
        await eventually(lambda: "default/fine" in sync.state.pods)
        assert (sync.malformed, sync.apply_errors) == (1, 1)
        assert "default/boom" not in sync.state.pods


def one_node_synced() -> tuple[MemoryBackend, StateSync]:
    """A backend with node n1 and its Device, and a StateSync that has listed it."""
    mb = MemoryBackend()
    mb.apply(node("n1"))
    mb.apply(device("n1"))
    sync = StateSync(mb, ClusterState())
    for kind in ("nodes", "devices", "pods"):
        sync.reconcile(kind, mb.store.list(kind)[0], initial=True)
    return mb, sync


def test_a_stale_pending_event_does_not_undo_a_bind() -> None:
    """The watch delivers "annotated, still pending" after the extender has already bound the pod:
    the devices must stay taken (else another pod could be given them in between)."""
    mb, sync = one_node_synced()
    obj = mb.apply(pod("p", uid="u1"))
    seen = mb.store.rv
    req = parse_pod(obj)
    alloc = PodAllocation(node="n1", containers=(ContainerAllocation(name="main", devices=(
        DeviceGrant(type="gpu", minor=0, core_milli=500, memory=8 * GiB),)),))
    sync.state.assume(req, alloc, now=0.0)
    mb.store.patch("pods", "default/p", {"metadata": {"annotations": encode_canonical(alloc)}})
    mb.store.patch("pods", "default/p", {"spec": {"nodeName": "n1"}})
    sync.state.bind(req.key)
    before = sync.state.usage_key()
    for ev in mb.store.events_since("pods", seen):
        sync.apply_event("pods", WatchEvent(ev.type, ev.object))
        assert sync.state.usage_key() == before
    assert sync.state.pods["default/p"].phase == "bound"


def test_the_bound_pod_of_an_assumed_allocation_is_marked_bound_without_reading_its_request_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch often shows the extender's bound pod before the Binding's answer: the state holds that
    very allocation, assumed, so the event only marks it bound (the request of the pending version is
    kept, the pod is not parsed again). Another allocation, or another pod under the name, is read."""
    import devshare.kube.sync as sync_module

    _, sync = one_node_synced()
    grant = lambda minor: PodAllocation(node="n1", containers=(ContainerAllocation(name="main", devices=(  # noqa: E731
        DeviceGrant(type="gpu", minor=minor, core_milli=500, memory=8 * GiB),)),))
    parsed: list[str] = []
    real_parse = sync_module.parse_pod
    monkeypatch.setattr(sync_module, "parse_pod", lambda obj: parsed.append(obj["metadata"]["name"]) or real_parse(obj))

    def bound(name: str, uid: str, alloc: PodAllocation) -> None:
        obj = pod(name, uid=uid)
        obj["metadata"]["annotations"] = encode_canonical(alloc)
        obj["spec"]["nodeName"] = "n1"
        obj["metadata"]["resourceVersion"] = "9"
        sync.apply_event("pods", WatchEvent("MODIFIED", obj))

    req = real_parse(pod("p", uid="u1"))
    sync.state.assume(req, grant(0), now=0.0)
    bound("p", "u1", grant(0))
    rec = sync.state.pods["default/p"]
    assert (rec.phase, rec.pod, parsed) == ("bound", req, [])
    # assumed on card 0 but bound on card 1 (written by someone else): the pod is read, card 1 counted
    q = real_parse(pod("q", uid="u2"))
    sync.state.assume(q, grant(0), now=0.0)
    bound("q", "u2", grant(1))
    assert parsed == ["q"] and sync.state.pods["default/q"].allocation == grant(1)
    assert sync.state.pods["default/q"].phase == "bound"
    # the same allocation, but a new pod under the name (another uid): the old record goes, the new pod is read
    r = real_parse(pod("r", uid="u3"))
    sync.state.assume(r, grant(2), now=0.0)
    bound("r", "u4", grant(2))
    assert parsed == ["q", "r"] and sync.state.pods["default/r"].pod.uid == "u4"


async def test_relist_releases_a_missing_pod_only_once_it_is_really_gone() -> None:
    mb = MemoryBackend()
    mb.apply(node("n1"))
    mb.apply(device("n1"))
    mb.apply(pod("late", node_name="n1", grants=[(0, 50, 8)]))
    mb.apply(pod("gone", node_name="n1", grants=[(1, 50, 8)]))
    sync = StateSync(mb, ClusterState(), backoff=fast_backoff)
    for kind in ("nodes", "devices", "pods"):
        sync.reconcile(kind, mb.store.list(kind)[0], initial=True)
    mb.store.delete("pods", "default/gone")  # deleted while the watch was away

    class ListTakenEarlier(MemoryBackend):
        async def list(self, kind: Kind) -> Any:  # a list from before "late" existed
            items, rv = self.store.list(kind)
            return type(await mb.list(kind))([o for o in items if o["metadata"]["name"] != "late"], rv)

    sync.backend = ListTakenEarlier(mb.store)
    await sync._list_with_retry("pods", initial=False)
    assert "default/late" in sync.state.pods  # a GET found it bound: kept
    assert "default/gone" not in sync.state.pods
    assert used(sync.state, "n1", 0) == (50.0, 8 * GiB)
    assert used(sync.state, "n1", 1) == (0.0, 0)


def ours(obj: dict[str, Any], scheduler: str = "devshare-scheduler") -> dict[str, Any]:
    obj["spec"]["schedulerName"] = scheduler
    return obj


def test_pending_pods_of_our_scheduler_are_kept_as_the_watch_delivers_them() -> None:
    mb = MemoryBackend()
    mb.apply(node("n1"))
    mb.apply(device("n1"))
    mb.apply(ours(pod("listed")))
    sync = StateSync(mb, ClusterState(), scheduler_name="devshare-scheduler")
    for kind in ("nodes", "devices", "pods"):
        sync.reconcile(kind, mb.store.list(kind)[0], initial=True)
    assert sync.pending_pod("default/listed") == mb.store.get("pods", "default/listed")
    seen = mb.store.rv
    mb.apply(ours(pod("other"), "default-scheduler"))  # another scheduler's pod: not kept
    mb.apply(ours(pod("p")))
    mb.store.patch("pods", "default/p", {"metadata": {"annotations": {"x": "1"}}})
    gone = mb.apply(ours(pod("gone")))
    mb.store.delete("pods", "default/gone")
    done = mb.apply(ours(pod("done")))
    mb.store.patch("pods", "default/done", {"status": {"phase": "Failed"}})
    mb.store.patch("pods", "default/listed", {"spec": {"nodeName": "n1"}})
    for ev in mb.store.events_since("pods", seen):
        sync.apply_event("pods", WatchEvent(ev.type, ev.object))
    assert sync.pending_pod("default/p") == mb.store.get("pods", "default/p")  # the latest version
    assert sync.pending_pod("default/p")["metadata"]["annotations"] == {"x": "1"}  # type: ignore[index]
    for key in ("default/other", "default/gone", "default/done", "default/listed"):  # bound, deleted, finished
        assert sync.pending_pod(key) is None, key
    assert gone and done
    # a re-list drops the pending pods it no longer shows
    mb.store.delete("pods", "default/p")
    sync.reconcile("pods", mb.store.list("pods")[0], initial=False, release_vanished=True)
    assert sync.pending == {}


def test_pending_pods_are_bounded_and_the_oldest_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("devshare.kube.sync.MAX_PENDING", 2)
    sync = StateSync(MemoryBackend(), ClusterState(), scheduler_name="s")
    for name in ("a", "b", "c"):
        sync.apply_event("pods", WatchEvent("ADDED", ours(pod(name, uid=name), "s")))
    assert sorted(sync.pending) == ["default/a", "default/b"]  # scheduled first: kept; c is read at its bind
    sync.apply_event("pods", WatchEvent("MODIFIED", ours(pod("a", uid="a", annotations={"v": "2"}), "s")))
    assert sync.pending["default/a"]["metadata"]["annotations"] == {"v": "2"}  # a kept pod is still updated
    sync.apply_event("pods", WatchEvent("DELETED", ours(pod("b", uid="b"), "s")))
    sync.apply_event("pods", WatchEvent("MODIFIED", ours(pod("c", uid="c"), "s")))
    assert sorted(sync.pending) == ["default/a", "default/c"]


def test_without_a_scheduler_name_no_pending_pod_is_kept() -> None:
    sync = StateSync(MemoryBackend(), ClusterState())
    sync.apply_event("pods", WatchEvent("ADDED", ours(pod("a"))))
    assert sync.pending == {}
