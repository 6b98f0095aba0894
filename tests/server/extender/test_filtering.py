"""Filter and prioritize (server/extender/filtering.py): a shortlist of one holds the node it passes until
the pod's bind (``Filtering._hold``): kube-scheduler assumes the pod there and filters the next pods
before that bind arrives, so the next pod must not be told the same free card."""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from devshare.config import Configuration, Scheduling
from devshare.kube.errors import Unavailable
from devshare.kube.memory import MemoryBackend
from devshare.server.extender import filtering
from devshare.server.extender.serve import ExtenderOptions
from support.extender import bind, cluster, names_body, pod, post, running, settle

NODES = ["node-0", "node-1"]


def options(k: int = 1) -> ExtenderOptions:
    scheduling = Scheduling(shortlist=k, node_policy="binpack")
    return ExtenderOptions(config=msgspec.structs.replace(Configuration(), scheduling=scheduling))


def ours(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["schedulerName"] = "devshare-scheduler"
    return obj


def one_gpu_nodes(*names: str) -> MemoryBackend:
    """Two nodes of one GPU each and pending pods asking one whole GPU."""
    return cluster(2, gpus=1, pods=[ours(pod(n, gpus=1)) for n in names])


def stored(backend: MemoryBackend, name: str) -> dict[str, Any]:
    obj = backend.store.get("pods", f"default/{name}")
    assert obj is not None
    return obj


async def filtered(client: Any, backend: MemoryBackend, name: str, nodes: list[str] = NODES) -> list[str]:
    out = await post(client, "/filter", names_body(stored(backend, name), nodes))
    return list(out["NodeNames"])


async def test_the_next_pod_filtered_before_the_bind_is_not_told_the_held_card() -> None:
    backend = one_gpu_nodes("a", "b")
    async with running(backend, options()) as (client, runtime):
        await settle(runtime, backend)
        first = await filtered(client, backend, "a")
        second = await filtered(client, backend, "b")  # a's bind has not come yet
        assert len(first) == 1 and len(second) == 1 and first != second
        assert runtime.state.pods["default/a"].phase == "assumed"
        # the binds come in either order; each takes what its filter was told
        assert await bind(client, "b", second[0]) == ""
        assert await bind(client, "a", first[0]) == ""
        assert stored(backend, "a")["spec"]["nodeName"] == first[0]
        assert {r.phase for r in runtime.state.pods.values()} == {"bound"}


async def test_without_a_shortlist_of_one_nothing_is_held() -> None:
    backend = one_gpu_nodes("a")
    for k in (0, 2):
        async with running(backend, options(k)) as (client, runtime):
            await settle(runtime, backend)
            assert await filtered(client, backend, "a")
            assert "default/a" not in runtime.state.pods


async def test_a_pod_the_watch_does_not_hold_as_sent_holds_nothing() -> None:
    backend = one_gpu_nodes("a")
    async with running(backend, options()) as (client, runtime):
        await settle(runtime, backend)
        await post(client, "/filter", names_body(ours(pod("a", gpus=1)), NODES))  # no resourceVersion
        body = copy.deepcopy(stored(backend, "a"))
        body["metadata"]["resourceVersion"] = "999999"  # not the version the watch holds
        await post(client, "/filter", names_body(body, NODES))
        assert "default/a" not in runtime.state.pods


async def test_a_new_filter_of_the_pod_drops_its_earlier_hold() -> None:
    backend = one_gpu_nodes("a")
    async with running(backend, options()) as (client, runtime):
        await settle(runtime, backend)
        first = await filtered(client, backend, "a")
        again = await filtered(client, backend, "a")  # e.g. kube-scheduler's next try after a failure
        assert again == first  # its own hold did not push it off its best node
        assert runtime.state.pods["default/a"].allocation.node == first[0]
        assert await filtered(client, backend, "a", [n for n in NODES if n not in first]) != []
        assert runtime.state.pods["default/a"].allocation.node != first[0]  # one hold, the last filter's


async def test_a_bind_to_another_node_releases_the_hold_and_binds_there() -> None:
    backend = one_gpu_nodes("a", "b")
    async with running(backend, options()) as (client, runtime):
        await settle(runtime, backend)
        (held,) = await filtered(client, backend, "a")
        other = next(n for n in NODES if n != held)
        assert await bind(client, "a", other) == ""
        assert runtime.state.pods["default/a"].allocation.node == other
        assert await filtered(client, backend, "b") == [held]  # the held card is free again


class RefusingBackend(MemoryBackend):
    """A memory backend whose Bindings fail while ``refuse`` is set."""

    refuse = False

    async def bind_pod(self, namespace: str, name: str, node: str, **kw: Any) -> None:
        if self.refuse:
            raise Unavailable("injected: the API server is away")
        await super().bind_pod(namespace, name, node, **kw)


async def test_a_failed_bind_releases_the_hold() -> None:
    backend = RefusingBackend.from_objects(one_gpu_nodes("a", "b").objects())
    assert isinstance(backend, RefusingBackend)
    async with running(backend, options()) as (client, runtime):
        await settle(runtime, backend)
        (held,) = await filtered(client, backend, "a")
        backend.refuse = True
        assert "injected" in await bind(client, "a", held)
        assert "default/a" not in runtime.state.pods
        backend.refuse = False
        assert await filtered(client, backend, "b", [held]) == [held]  # free again


async def test_a_hold_whose_bind_never_comes_expires() -> None:
    backend = one_gpu_nodes("a", "b")
    now = [1000.0]
    async with running(backend, options(), clock=lambda: now[0]) as (client, runtime):
        await settle(runtime, backend)
        ext = runtime.extender
        (held,) = await filtered(client, backend, "a")
        ext.expire()
        assert runtime.state.pods["default/a"].phase == "assumed"
        now[0] += filtering.FILTER_HOLD_TTL + 1
        assert ext.expire() == ["default/a"]
        assert await filtered(client, backend, "b") == [held]
