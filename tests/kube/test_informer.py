"""The informer (kube/informer.py) feeding the engine's watched cluster: list, watch, resume, re-list on
410, reconnect, restart recovery, against the memory backend and the fake API server."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.state import ClusterState
from devshare.kube.backend import Backend, Kind
from devshare.kube.informer import Informer
from devshare.kube.memory import MemoryBackend
from devshare.kube.rest import KubeClient
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.codecs import encode_canonical
from devshare.model.pod import parse_pod
from fakeapi.plugin import fake_api, fake_kubeconfig, live_backend  # noqa: F401
from fakeapi.server import FakeApiServer
from support.cluster import usage_key
from support.kube import Following, GiB, device, following, node, pod
from support.waiting import eventually, settled


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
    backend = KubeClient.connect(server.write_kubeconfig(tmp_path / "kc"), watch_timeout=30)
    try:
        yield World(backend, server.put, server.delete)
    finally:
        await backend.close()
        await server.stop()


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
    async with following(world.backend) as sync:
        state = sync.state
        assert sync.informer.is_synced
        assert sorted(state.pods) == ["default/a", "default/c", "team/b"]
        assert all(r.phase == "bound" for r in state.pods.values())
        assert used(state, "n1", 0) == (80.0, 12 * GiB)
        assert used(state, "n2", 1) == (100.0, 16 * GiB)
        assert used(state, "n2", 2) == (0.0, 0)
        assert sync.cluster.malformed == 0


async def test_watch_events_update_the_state(world: World) -> None:
    seed(world)
    async with following(world.backend) as sync:
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
    async with following(world.backend) as sync:
        state = sync.state
        before = usage_key(state)
        world.delete("nodes", "n2")
        await eventually(lambda: "n2" not in state.nodes)
        assert "default/c" in state.pods  # never freed silently
        world.put(node("n2"))
        await eventually(lambda: "n2" in state.nodes)
        assert usage_key(state) == before


async def test_malformed_annotations_are_counted_not_fatal(world: World) -> None:
    world.put(node("n1"))
    world.put(device("n1"))
    world.put(pod("bad", node_name="n1", annotations={"devshare.io/allocation": "{not json"}))
    world.put(pod("elsewhere", node_name="n1", grants=[(0, 10, 1)]))
    async with following(world.backend) as sync:
        assert sync.cluster.malformed == 1
        assert "default/elsewhere" in sync.state.pods
        wrong = pod("moved", node_name="n1", grants=[(0, 10, 1)])
        wrong["spec"]["nodeName"] = "n9"  # the allocation names another node
        world.put(wrong)
        await eventually(lambda: sync.cluster.malformed == 2)
        assert "default/moved" not in sync.state.pods


async def test_sync_waits_until_the_api_answers(fake_api: FakeApiServer, live_backend: KubeClient) -> None:  # noqa: F811
    fake_api.put(node("n1"))
    fake_api.fail_next("list", "nodes", times=3, code=503)
    fake_api.fail_next("list", "pods", times=1, code=0)
    sync = Following(live_backend)
    sync.informer.start()
    try:
        assert not sync.informer.is_synced
        await settled(sync.informer.synced.wait())
        assert "n1" in sync.state.nodes
        assert fake_api.count("list", "nodes") == 4
    finally:
        await sync.informer.stop()


def pod_watches(fake_api: FakeApiServer) -> list[dict[str, str]]:  # noqa: F811
    return [q for m, p, q in fake_api.requests if p == "/api/v1/pods" and q.get("watch") == "true"]


async def test_watch_resumes_from_the_last_version_after_a_dropped_connection(
    fake_api: FakeApiServer, live_backend: KubeClient  # noqa: F811
) -> None:
    seed(fake_api)  # type: ignore[arg-type]
    async with following(live_backend) as sync:
        listed_rv = sync.informer.resource_versions["pods"]
        await eventually(lambda: len(pod_watches(fake_api)) == 1)
        assert pod_watches(fake_api)[0]["resourceVersion"] == listed_rv

        added = fake_api.put(pod("d", node_name="n2", grants=[(3, 20, 2)]))
        await eventually(lambda: "default/d" in sync.state.pods)
        last_rv = added["metadata"]["resourceVersion"]
        await eventually(lambda: sync.informer.resource_versions["pods"] == last_rv)

        fake_api.fail_next("watch", "pods", times=2, code=503)
        assert fake_api.drop_watches() == 3
        fake_api.put(pod("e", node_name="n2", grants=[(3, 20, 2)]))  # happens while disconnected
        await eventually(lambda: "default/e" in sync.state.pods)
        assert sync.informer.reconnects >= 3
        assert sync.informer.relists == 0
        assert fake_api.count("list", "pods") == 1  # resumed, never re-listed
        assert all(q["resourceVersion"] == last_rv for q in pod_watches(fake_api)[1:])
        assert used(sync.state, "n2", 3) == (40.0, 4 * GiB)


@pytest.mark.parametrize("gone_as_http", [False, True])
async def test_relist_on_410_reconciles_and_keeps_assumed_pods(
    fake_api: FakeApiServer, live_backend: KubeClient, gone_as_http: bool  # noqa: F811
) -> None:
    fake_api.gone_as_http = gone_as_http
    seed(fake_api)  # type: ignore[arg-type]
    async with following(live_backend) as sync:
        state = sync.state
        # a bind in flight: reserved by the scheduler, not yet visible as bound
        inflight = parse_pod(pod("pending"))
        alloc = PodAllocation(node="n2", containers=(
            ContainerAllocation(name="main", devices=(DeviceGrant(type="gpu", minor=0, core_milli=500,
                                                                  memory=8 * GiB),)),))
        sync.lifecycle.assume(inflight, alloc, now=0.0, ttl=math.inf)
        # one kube-scheduler knows before our watch does (created after our list)
        ghost = parse_pod(pod("ghost", core=10, memory_gib=1))
        sync.lifecycle.assume(ghost, PodAllocation(node="n2", containers=(ContainerAllocation(name="main", devices=(
            DeviceGrant(type="gpu", minor=0, core_milli=100, memory=GiB),)),)), now=0.0, ttl=math.inf)

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

        await eventually(lambda: sync.informer.relists >= 3)
        await eventually(lambda: "default/new" in state.pods and "default/a" not in state.pods)
        assert "n1" not in state.nodes and "n1" not in state.devices
        assert "team/b" in state.pods  # on a removed node, but not deleted
        assert state.pods["default/pending"].phase == "assumed"
        assert state.pods["default/ghost"].phase == "assumed"
        assert used(state, "n2", 0) == (60.0, 9 * GiB)
        assert fake_api.count("list", "pods") == 2


async def test_expired_watch_event_triggers_relist(fake_api: FakeApiServer,  # noqa: F811
                                                   live_backend: KubeClient) -> None:  # noqa: F811
    seed(fake_api)  # type: ignore[arg-type]
    async with following(live_backend) as sync:
        await eventually(lambda: fake_api.watch_count() == 3)
        fake_api.expire_watches()
        await eventually(lambda: sync.informer.relists == 3)
        fake_api.put(pod("late", node_name="n1", grants=[(1, 10, 1)]))
        await eventually(lambda: "default/late" in sync.state.pods)


async def test_bookmarks_advance_the_version(fake_api: FakeApiServer, live_backend: KubeClient) -> None:  # noqa: F811
    fake_api.put(node("n1"))
    async with following(live_backend) as sync:
        await eventually(lambda: fake_api.watch_count() == 3)
        fake_api.put(pod("x"))  # a pod event moves the global version
        await eventually(lambda: sync.informer.resource_versions["pods"] == str(fake_api.store.rv))
        before = sync.informer.events
        fake_api.send_bookmarks()
        await eventually(lambda: sync.informer.resource_versions["nodes"] == str(fake_api.store.rv))
        assert sync.informer.events == before


async def bind_through(backend: Backend, lifecycle: Lifecycle, obj: dict[str, Any], node_name: str,
                       grants: list[tuple[int, int, int]]) -> None:
    """What the extender does: reserve, annotate, bind, mark bound."""
    req = parse_pod(obj)
    alloc = PodAllocation(node=node_name, containers=(ContainerAllocation(name="main", devices=tuple(
        DeviceGrant(type="gpu", minor=m, id=f"GPU-{node_name}-{m}", core_milli=c * 10, memory=g * GiB)
        for m, c, g in grants)),))
    lifecycle.assume(req, alloc, now=0.0)
    await backend.patch_pod_annotations(req.namespace, req.name, encode_canonical(alloc))
    await backend.bind_pod(req.namespace, req.name, node_name)
    lifecycle.confirm(req, alloc)


async def test_restart_rebuilds_the_same_usage(world: World) -> None:
    seed(world)
    world.put(pod("p1", ns="team"))
    world.put(pod("p2", core=100, memory_gib=16))
    async with following(world.backend) as first:
        await bind_through(world.backend, first.lifecycle, pod("p1", ns="team"), "n1", [(1, 50, 8)])
        await bind_through(world.backend, first.lifecycle, pod("p2", core=100, memory_gib=16), "n2",
                           [(0, 100, 16)])
        await eventually(lambda: first.informer.events >= 4)  # the patches and binds came back through the watch
        await asyncio.sleep(0.05)
        live = usage_key(first.state)
        live_pods = {k: (r.allocation, r.phase) for k, r in first.state.pods.items()}

    async with following(world.backend) as second:  # a restart: a fresh state over the same cluster
        assert usage_key(second.state) == live
        assert {k: (r.allocation, r.phase) for k, r in second.state.pods.items()} == live_pods
        assert second.cluster.overbooked == 0
        # events about pods it already holds never count them twice
        world.put({**pod("p2", core=100, memory_gib=16, node_name="n2", grants=[(0, 100, 16)]),
                   "status": {"phase": "Running"}})
        await eventually(lambda: second.informer.events >= 1)
        await asyncio.sleep(0.05)
        assert usage_key(second.state) == live


async def test_an_object_that_breaks_the_handler_does_not_stop_the_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    import devshare.engine.watched as watched_module

    def exploding(obj: dict[str, Any]) -> Any:
        if obj["metadata"]["name"] == "boom":
            raise RuntimeError("a bug")
        return parse_pod(obj)

    monkeypatch.setattr(watched_module, "parse_pod", exploding)
    mb = MemoryBackend()
    mb.apply(node("n1"))
    mb.apply(device("n1"))
    async with following(mb) as sync:
        weird = pod("weird", node_name="n1", grants=[(0, 10, 1)])
        weird["metadata"]["annotations"] = ["not", "a", "mapping"]
        mb.store.put("pods", "default/weird", weird)
        mb.apply(pod("boom", node_name="n1", grants=[(0, 10, 1)]))
        mb.apply(pod("fine", node_name="n1", grants=[(1, 10, 1)]))
        await eventually(lambda: "default/fine" in sync.state.pods)
        assert (sync.cluster.malformed, sync.informer.apply_errors) == (1, 1)
        assert "default/boom" not in sync.state.pods


async def test_relist_releases_a_missing_pod_only_once_it_is_really_gone() -> None:
    mb = MemoryBackend()
    mb.apply(node("n1"))
    mb.apply(device("n1"))
    mb.apply(pod("late", node_name="n1", grants=[(0, 50, 8)]))
    mb.apply(pod("gone", node_name="n1", grants=[(1, 50, 8)]))
    sync = Following(mb).listed(mb)
    mb.store.delete("pods", "default/gone")  # deleted while the watch was away

    class ListTakenEarlier(MemoryBackend):
        async def list(self, kind: Kind) -> Any:  # a list from before "late" existed
            items, rv = self.store.list(kind)
            return type(await mb.list(kind))([o for o in items if o["metadata"]["name"] != "late"], rv)

    informer = Informer(ListTakenEarlier(mb.store), [sync.cluster])
    await informer._list_with_retry("pods", initial=False)
    assert "default/late" in sync.state.pods  # a GET found it bound: kept
    assert "default/gone" not in sync.state.pods
    assert used(sync.state, "n1", 0) == (50.0, 8 * GiB)
    assert used(sync.state, "n1", 1) == (0.0, 0)


