"""The leader writes the steering taint onto the Nodes (issue 41): only where it is wrong, keeping every
other taint, never over a newer node, at most so many a round, and not at all when it does not lead."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from devshare.engine.state import ClusterState
from devshare.engine.steering import TAINT_KEY
from devshare.kube.errors import BackendError
from devshare.kube.memory import MemoryBackend
from devshare.server.extender.steering import TAINT, Steerer
from devshare.server.extender.view import Unelected
from support.cluster import add_node, bound
from support.waiting import settled

OTHER = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


def node(name: str, taints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {}}
    if taints is not None:
        obj["spec"]["taints"] = taints
    return obj


async def nothing() -> None:
    return None


class Follower:
    def may_write(self) -> bool:
        return False

    async def check(self) -> str | None:
        return "not the leader"


def cluster(objects: list[dict[str, Any]]) -> tuple[ClusterState, MemoryBackend]:
    state = ClusterState()
    add_node(state, "free", 2)  # a GPU nobody uses: marked
    add_node(state, "busy", 1)  # its one GPU used: not marked
    bound(state, "a", "busy", 0, core=300)
    add_node(state, "plain", 0)  # no GPU: never marked
    return state, MemoryBackend.from_objects(objects)


async def steerer_for(state: ClusterState, backend: MemoryBackend, **kw: Any) -> Steerer:
    s = Steerer(state, backend, kw.pop("leadership", Unelected()), ready=nothing, enabled=kw.pop("enabled", True), **kw)
    result = await backend.list("nodes")
    s.listed("nodes", result.items, initial=True)
    return s


def taints_of(backend: MemoryBackend, name: str) -> list[dict[str, Any]]:
    obj = backend.store.get("nodes", name)
    assert obj is not None
    return list((obj.get("spec") or {}).get("taints") or [])


async def test_only_wrong_nodes_are_written_and_other_taints_are_kept() -> None:
    state, backend = cluster([node("free", [OTHER]), node("busy", [dict(TAINT)]), node("plain")])
    s = await steerer_for(state, backend)
    assert sorted(s.plan()) == [("busy", False), ("free", True)]
    assert await s.reconcile() == 2
    assert taints_of(backend, "free") == [OTHER, TAINT]
    assert taints_of(backend, "busy") == []
    assert taints_of(backend, "plain") == []
    assert s.plan() == [] and await s.reconcile() == 0  # the written nodes are kept as written


async def test_off_the_leader_removes_its_taints_only() -> None:
    state, backend = cluster([node("free", [OTHER, dict(TAINT)]), node("busy"), node("plain", [dict(TAINT)])])
    s = await steerer_for(state, backend, enabled=False)
    await s.reconcile()
    assert taints_of(backend, "free") == [OTHER]
    assert taints_of(backend, "plain") == []


async def test_a_node_changed_since_it_was_read_is_not_overwritten() -> None:
    state, backend = cluster([node("free"), node("busy"), node("plain")])
    s = await steerer_for(state, backend)
    backend.apply(node("free", [OTHER]))  # someone else's taint, not yet seen by the watch
    assert await s.reconcile() == 0 and s.conflicts == 1
    assert taints_of(backend, "free") == [OTHER]
    obj = backend.store.get("nodes", "free")
    assert obj is not None
    s.changed("nodes", "MODIFIED", obj)  # the watch delivers it: written on top of it
    assert await s.reconcile() == 1
    assert taints_of(backend, "free") == [OTHER, TAINT]


async def test_a_round_writes_at_most_per_round_and_the_next_goes_on_from_there() -> None:
    state = ClusterState()
    for i in range(5):
        add_node(state, f"n{i}", 1)
    backend = MemoryBackend.from_objects([node(f"n{i}") for i in range(5)])
    s = await steerer_for(state, backend, per_round=2)
    assert [await s.reconcile() for _ in range(4)] == [2, 2, 1, 0]
    assert all(taints_of(backend, f"n{i}") == [TAINT] for i in range(5))


async def test_a_follower_writes_nothing() -> None:
    state, backend = cluster([node("free"), node("busy"), node("plain")])
    ticks: list[float] = []

    async def sleep(s: float) -> None:
        ticks.append(s)
        if len(ticks) > 3:
            raise asyncio.CancelledError
        await asyncio.sleep(0)

    s = await steerer_for(state, backend, leadership=Follower(), sleep=sleep)
    with pytest.raises(asyncio.CancelledError):
        await s.run()
    assert s.written == 0 and taints_of(backend, "free") == []


class Refusing(MemoryBackend):
    async def patch_node_taints(self, node: str, taints: list[dict[str, Any]], resource_version: str
                                ) -> dict[str, Any]:
        raise BackendError('nodes "free" is forbidden: cannot patch resource "nodes"', code=403)


async def test_refused_by_rbac_it_stops_with_one_line(caplog: pytest.LogCaptureFixture) -> None:
    state, _ = cluster([])
    backend = Refusing.from_objects([node("free"), node("busy"), node("plain")])
    s = Steerer(state, backend, Unelected(), ready=nothing, enabled=True, sleep=lambda _: asyncio.sleep(0))
    s.listed("nodes", (await backend.list("nodes")).items, initial=True)
    await settled(s.run())  # returns: writes stopped for good
    assert s.stopped and "forbidden" in s.stopped
    assert [r for r in caplog.records if "no longer marks nodes" in r.getMessage()]


async def test_the_watch_keeps_each_nodes_taints_and_forgets_deleted_nodes() -> None:
    state, backend = cluster([node("free", [OTHER])])
    s = await steerer_for(state, backend)
    assert s.nodes["free"][1] == [OTHER]
    s.changed("nodes", "DELETED", node("free"))
    assert s.nodes == {} and s.plan() == []
    s.changed("pods", "ADDED", {"metadata": {"name": "p"}})  # other kinds are not its business
    assert s.nodes == {}


def test_the_taint_is_devshares_prefer_no_schedule() -> None:
    assert TAINT == {"key": TAINT_KEY, "effect": "PreferNoSchedule"}


async def test_a_round_with_nothing_new_looks_at_nothing() -> None:
    state, backend = cluster([node("free"), node("busy"), node("plain")])
    s = await steerer_for(state, backend)
    assert await s.reconcile() == 1
    assert await s.reconcile() == 0  # nothing wrong: remembered
    calls = 0
    real = s.plan

    def counting() -> list[tuple[str, bool]]:
        nonlocal calls
        calls += 1
        return real()

    s.plan = counting  # type: ignore[method-assign]
    assert await s.reconcile() == 0 and calls == 0  # neither the state nor a Node changed
    bound(state, "b", "free", 0, core=100)
    bound(state, "c", "free", 1, core=100)  # free's GPUs now both in use
    assert await s.reconcile() == 1 and calls == 1
    assert taints_of(backend, "free") == []
