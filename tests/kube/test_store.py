"""The versioned object store behind the memory backend and the fake API server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.kube.errors import Conflict, Gone, NotFound
from devshare.kube.store import ObjectStore, merge_patch


def obj(name: str, value: int = 0) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": name}, "value": value}


def test_merge_patch_follows_rfc7386() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}
    patch = {"a": "z", "c": {"f": None}, "l": [3], "n": {"x": 1}}
    assert merge_patch(target, patch) == {"a": "z", "c": {"d": "e"}, "l": [3], "n": {"x": 1}}
    assert target == {"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]}  # untouched


def test_writes_bump_versions_and_conflicts() -> None:
    s = ObjectStore()
    a = s.create("nodes", "a", obj("a"))
    assert a["metadata"]["resourceVersion"] == "1"
    with pytest.raises(Conflict):
        s.create("nodes", "a", obj("a"))
    b = s.update("nodes", "a", obj("a", 1), expect_rv="1")
    assert b["metadata"]["resourceVersion"] == "2"
    with pytest.raises(Conflict):
        s.update("nodes", "a", obj("a", 2), expect_rv="1")
    with pytest.raises(NotFound):
        s.patch("nodes", "zz", {"value": 1})
    assert a["value"] == 0  # an object handed out is a snapshot
    assert s.list("nodes") == ([b], "2")


def test_watch_from_compacted_version_is_gone() -> None:
    s = ObjectStore()
    s.put("nodes", "a", obj("a"))
    s.put("nodes", "b", obj("b"))
    assert [e.key for e in s.events_since("nodes", 0)] == ["a", "b"]
    s.compact()
    with pytest.raises(Gone):
        s.events_since("nodes", 1)
    assert s.events_since("nodes", 2) == []


def test_history_limit_compacts_automatically() -> None:
    s = ObjectStore(history_limit=3)
    for i in range(10):
        s.put("nodes", f"n{i}", obj(f"n{i}"))
    assert len(s.history) == 3
    assert s.events_since("nodes", 7)[0].rv == 8
    with pytest.raises(Gone):
        s.events_since("nodes", 6)


async def test_wait_change_wakes_on_write() -> None:
    s = ObjectStore()
    waiter = asyncio.create_task(s.wait_change(0, timeout=5))
    await asyncio.sleep(0)
    s.put("nodes", "a", obj("a"))
    assert await waiter
    assert not await s.wait_change(s.rv, timeout=0.01)


ops = st.lists(st.tuples(st.sampled_from(["put", "delete", "patch"]), st.sampled_from("abcd"),
                         st.integers(0, 5)), max_size=40)


@settings(max_examples=150, deadline=None)
@given(ops, st.integers(0, 40))
def test_replaying_history_from_any_version_reaches_the_listed_state(
    script: list[tuple[str, str, int]], cut: int
) -> None:
    """A watcher that listed at version v and applies every event after v ends with what a fresh
    list shows (the contract the informer relies on)."""
    s = ObjectStore(history_limit=None)
    snapshot: dict[str, dict[str, Any]] = {}
    snap_rv = 0
    for i, (op, key, value) in enumerate(script):
        if i == cut:
            snapshot = {o["metadata"]["name"]: o for o in s.list("nodes")[0]}
            snap_rv = s.rv
        if op == "put":
            s.put("nodes", key, obj(key, value))
        elif key in s.objects.get("nodes", {}):
            if op == "delete":
                s.delete("nodes", key)
            else:
                s.patch("nodes", key, {"value": value})
    if cut >= len(script):
        snapshot = {o["metadata"]["name"]: o for o in s.list("nodes")[0]}
        snap_rv = s.rv
    for ev in s.events_since("nodes", snap_rv):
        if ev.type == "DELETED":
            snapshot.pop(ev.key)
        else:
            snapshot[ev.key] = ev.object
    items, rv = s.list("nodes")
    assert snapshot == {o["metadata"]["name"]: o for o in items}
    assert rv == str(s.rv)
    versions = [int(o["metadata"]["resourceVersion"]) for o in items]
    assert all(v <= s.rv for v in versions)
