"""Pods refused for devices in use are nudged (an annotation patch kube-scheduler requeues them on)
when the extender's state frees devices: only those still pending, of its scheduler, once per round
and at most once per interval each."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from devshare.kube.memory import MemoryBackend
from devshare.server.extender.requeue import FREED_AT, Requeue
from support.extender import Switch, cluster, full_node_pods, names_body, pod, post, running, settle
from support.waiting import settled


class Patches(MemoryBackend):
    """Records the annotation patches."""

    def __init__(self) -> None:
        super().__init__()
        self.patched: list[tuple[str, dict[str, Any]]] = []

    async def patch_pod_annotations(self, namespace: str, name: str,
                                    annotations: Mapping[str, str | None]) -> dict[str, Any]:
        self.patched.append((f"{namespace}/{name}", dict(annotations)))
        return {}


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def held(node: str = "n1") -> dict[str, Any]:
    """A deleted pod that held devices (bound, with its allocation)."""
    p = pod("holder", gpus=1, node_name=node, annotations={"devshare.io/allocation": "{}"})
    return p


class Pending:
    """The pending pods the watch keeps (the one part of :class:`ClusterView` the requeue reads)."""

    def __init__(self, pods: dict[str, dict[str, Any]]) -> None:
        self.pods = pods

    def pending_pod(self, key: str) -> dict[str, Any] | None:
        return self.pods.get(key)


def requeue(pending: dict[str, dict[str, Any]], leadership: Switch | None = None,
            **kw: Any) -> tuple[Requeue, Patches, Clock]:
    backend, clock = Patches(), Clock()
    return Requeue(backend, Pending(pending), leadership or Switch(), clock=clock, **kw), backend, clock  # type: ignore[arg-type]


async def test_freed_devices_nudge_the_refused_pods_still_pending() -> None:
    pending = {"default/a": pod("a", uid="u-a"), "default/b": pod("b", uid="u-b"), "default/c": pod("c", uid="new")}
    rq, backend, _ = requeue(pending)
    rq.refused_pod("default/a", "u-a")
    rq.refused_pod("default/b", "u-b")
    rq.refused_pod("default/c", "u-c")  # re-created since: another pod under that name
    rq.refused_pod("default/gone", "u-g")  # no longer pending (bound, deleted)
    assert await rq.round() == 0  # nothing freed yet
    rq.changed("pods", "DELETED", held())
    assert await rq.round() == 2
    assert sorted(k for k, _ in backend.patched) == ["default/a", "default/b"]
    assert all(set(a) == {FREED_AT} and a[FREED_AT].endswith("Z") for _, a in backend.patched)
    assert sorted(rq.refused) == ["default/a", "default/b"]  # the others are forgotten
    assert rq.nudged == 2


async def test_only_pods_that_held_devices_and_device_changes_count_as_freed() -> None:
    rq, backend, _ = requeue({"default/a": pod("a", uid="u-a")})
    rq.refused_pod("default/a", "u-a")
    rq.changed("pods", "DELETED", pod("plain"))  # held nothing
    rq.changed("pods", "MODIFIED", held())  # still running
    rq.changed("nodes", "MODIFIED", {"metadata": {"name": "n1"}})
    assert await rq.round() == 0
    finished = held()
    finished["status"] = {"phase": "Succeeded"}
    rq.changed("pods", "MODIFIED", finished)
    assert await rq.round() == 1
    device = {"metadata": {"name": "n1"}, "spec": {"devices": [{"minor": 0}]}}
    rq._last.clear()
    rq.changed("devices", "MODIFIED", device)
    assert await rq.round() == 1
    rq._last.clear()
    rq.changed("devices", "MODIFIED", json.loads(json.dumps(device)))  # the same devices: nothing freed
    assert await rq.round() == 0
    assert len(backend.patched) == 2


async def test_a_pod_is_nudged_at_most_once_per_interval_and_not_forgotten() -> None:
    rq, backend, clock = requeue({"default/a": pod("a", uid="u-a")}, per_pod=2.0)
    rq.refused_pod("default/a", "u-a")
    rq.devices_freed()
    assert await rq.round() == 1
    clock.now += 0.5
    rq.devices_freed()
    assert await rq.round() == 0  # too soon: owed, not dropped
    assert rq._timer is not None  # woken again when its interval has passed
    clock.now += 2.0
    assert await rq.round() == 1
    assert len(backend.patched) == 2


async def test_a_round_nudges_at_most_per_round_pods_and_the_rest_next() -> None:
    pending = {f"default/p{i}": pod(f"p{i}", uid=f"u{i}") for i in range(5)}
    rq, backend, _ = requeue(pending, per_round=2)
    for i in range(5):
        rq.refused_pod(f"default/p{i}", f"u{i}")
    rq.devices_freed()
    assert [await rq.round() for _ in range(4)] == [2, 2, 1, 0]
    assert sorted(k for k, _ in backend.patched) == sorted(pending)


async def test_a_follower_and_pods_that_passed_are_not_nudged() -> None:
    leader = Switch(leading=False)
    rq, backend, _ = requeue({"default/a": pod("a", uid="u-a"), "default/b": pod("b", uid="u-b")}, leader)
    rq.refused_pod("default/a", "u-a")
    rq.refused_pod("default/b", "u-b")
    rq.forget("default/b")  # a later filter passed it
    rq.devices_freed()
    assert await rq.round() == 0
    leader.leading = True
    rq.devices_freed()
    assert await rq.round() == 1 and backend.patched[0][0] == "default/a"


def ours(p: dict[str, Any]) -> dict[str, Any]:
    p["spec"]["schedulerName"] = "devshare-scheduler"
    return p


async def test_the_extender_nudges_a_refused_pod_once_its_devices_are_freed() -> None:
    busy = full_node_pods("node-0", 1)
    waiting, never = ours(pod("waiting", gpus=1)), ours(pod("never", gpus=2))
    backend = cluster(1, gpus=1, pods=[*busy, waiting, never])
    async with running(backend) as (client, runtime):
        await settle(runtime, backend)
        for p in (waiting, never):
            stored = backend.store.get("pods", f"default/{p['metadata']['name']}")
            out = await post(client, "/filter", names_body(stored, ["node-0"]))
            assert out["NodeNames"] == []
        assert list(runtime.extender.requeue.refused) == ["default/waiting"]  # never: no node is that large
        backend.store.delete("pods", f"default/{busy[0]['metadata']['name']}")

        async def nudged() -> dict[str, Any]:
            while True:
                obj = backend.store.get("pods", "default/waiting")
                if FREED_AT in (obj["metadata"].get("annotations") or {}):
                    return obj
                await asyncio.sleep(0.02)

        await settled(nudged())
        assert FREED_AT not in (backend.store.get("pods", "default/never")["metadata"].get("annotations") or {})
        metrics = await (await client.get("/metrics")).text()
        assert "devshare_extender_requeue_nudges_total 1.0" in metrics
