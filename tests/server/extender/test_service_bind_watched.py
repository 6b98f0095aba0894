"""Bind decides from the pending pod as the state's watch delivered it (the API server's object) when
it is the pod kube-scheduler filtered, without reading it again; a Binding that meets a changed pod
reads it once and decides again. Never from the /filter body."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from devshare.kube.memory import MemoryBackend
from devshare.model.codecs import decode_allocation
from devshare.model.errors import InvalidInput
from support.extender import bind, cluster, names_body, pod, post, running, settle


class CountingBackend(MemoryBackend):
    """A memory backend that counts the pod reads."""

    gets = 0

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets += 1
        return await super().get_pod(namespace, name)


def backend_with(*pods: dict[str, Any]) -> CountingBackend:
    base = cluster(2, gpus=2, pods=list(pods))
    out = CountingBackend.from_objects(base.objects())
    assert isinstance(out, CountingBackend)
    return out


def ours(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["schedulerName"] = "devshare-scheduler"
    return obj


def stored(backend: MemoryBackend, name: str) -> dict[str, Any]:
    obj = backend.store.get("pods", f"default/{name}")
    assert obj is not None
    return obj


async def test_bind_after_filter_reads_no_pod() -> None:
    backend = backend_with(ours(pod("p", core=60, mem="10Gi")))
    async with running(backend) as (client, runtime):
        await settle(runtime, backend)
        filtered = stored(backend, "p")
        out = await post(client, "/filter", names_body(filtered, ["node-0", "node-1"]))
        assert out["NodeNames"]
        assert await bind(client, "p", out["NodeNames"][0], uid=filtered["metadata"]["uid"]) == ""
        assert backend.gets == 0
        assert stored(backend, "p")["spec"]["nodeName"] == out["NodeNames"][0]
        assert runtime.extender.binder.rereads == 0


async def test_a_forged_filter_body_never_decides_the_bind() -> None:
    backend = backend_with(ours(pod("p", core=60, mem="10Gi")))
    async with running(backend) as (client, runtime):
        await settle(runtime, backend)
        real = stored(backend, "p")
        forged = ours(pod("p", core=5, mem="1Gi", uid=real["metadata"]["uid"],
                          resource_version=real["metadata"]["resourceVersion"]))
        await post(client, "/filter", names_body(forged, ["node-0"]))
        assert await bind(client, "p", "node-0", uid=real["metadata"]["uid"]) == ""
        alloc = decode_allocation(stored(backend, "p")["metadata"]["annotations"])
        assert alloc is not None
        (grant,) = [g for _, g in alloc.grants()]
        assert grant.core_milli == 600 and grant.memory == 10 * 2**30  # the watched pod's ask
        assert backend.gets == 0


async def test_a_pod_changed_since_the_watch_saw_it_is_read_once_and_bound_as_it_is_now() -> None:
    backend = backend_with(ours(pod("p", core=60, mem="10Gi")))
    async with running(backend) as (client, runtime):
        await settle(runtime, backend)
        old = copy.deepcopy(stored(backend, "p"))
        await post(client, "/filter", names_body(old, ["node-0"]))
        backend.store.patch("pods", "default/p", {"metadata": {"annotations": {"note": "changed"}}})
        await settle(runtime, backend)
        runtime.cluster.pending["default/p"] = old  # as if the watch had not delivered the change yet
        assert await bind(client, "p", "node-0", uid=old["metadata"]["uid"]) == ""
        assert backend.gets == 1 and runtime.extender.binder.rereads == 1
        now = stored(backend, "p")
        assert now["spec"]["nodeName"] == "node-0" and now["metadata"]["annotations"]["note"] == "changed"
        assert runtime.state.pods["default/p"].phase == "bound"


async def test_without_its_filter_or_with_another_version_the_pod_is_read() -> None:
    backend = backend_with(ours(pod("p", core=60, mem="10Gi")), ours(pod("q", core=60, mem="10Gi")))
    async with running(backend) as (client, runtime):
        await settle(runtime, backend)
        assert await bind(client, "p", "node-0") == ""  # no filter remembered for it
        assert backend.gets == 1
        other = stored(backend, "q")
        await post(client, "/filter", names_body({**other, "metadata": {**other["metadata"], "resourceVersion": "1"}},
                                                 ["node-1"]))
        assert await bind(client, "q", "node-1") == ""  # the filter saw another version
        assert backend.gets == 2


async def test_a_pod_of_another_scheduler_is_read() -> None:
    backend = backend_with(pod("p", core=60, mem="10Gi"))  # no schedulerName: not kept from the watch
    async with running(backend) as (client, runtime):
        await settle(runtime, backend)
        await post(client, "/filter", names_body(stored(backend, "p"), ["node-0"]))
        assert await bind(client, "p", "node-0") == ""
        assert backend.gets == 1


async def test_filter_and_bind_of_a_watched_pod_read_its_request_once(monkeypatch: Any) -> None:
    import devshare.server.extender.requests as requests_module

    reads: list[str] = []
    real_parse = requests_module.parse_pod

    def counting(obj: dict[str, Any]) -> Any:
        reads.append(obj["metadata"]["name"])
        return real_parse(obj)

    monkeypatch.setattr(requests_module, "parse_pod", counting)
    backend = backend_with(ours(pod("p", core=60, mem="10Gi")))
    async with running(backend) as (client, runtime):
        await settle(runtime, backend)
        filtered = stored(backend, "p")
        out = await post(client, "/filter", names_body(filtered, ["node-0", "node-1"]))
        assert await bind(client, "p", out["NodeNames"][0], uid=filtered["metadata"]["uid"]) == ""
        assert reads == ["p"]  # the watch's object, read once for both verbs
        assert backend.gets == 0


async def test_a_forged_filter_body_of_a_watched_pod_is_judged_as_the_watched_pod() -> None:
    backend = backend_with(ours(pod("p", core=60, mem="1000Gi")))  # fits no card
    async with running(backend) as (client, runtime):
        await settle(runtime, backend)
        real = stored(backend, "p")
        forged = ours(pod("p", core=5, mem="1Gi", uid=real["metadata"]["uid"],
                          resource_version=real["metadata"]["resourceVersion"]))
        out = await post(client, "/filter", names_body(forged, ["node-0", "node-1"]))
        assert out["NodeNames"] == [] and set(out["FailedNodes"]) | set(out["FailedAndUnresolvableNodes"]) == {
            "node-0", "node-1"}
        # another version than the watch's: read from the body, and bind still decides from the pod itself
        older = ours(pod("p", core=5, mem="1Gi", uid=real["metadata"]["uid"], resource_version="1"))
        out = await post(client, "/filter", names_body(older, ["node-0"]))
        assert out["NodeNames"] == ["node-0"]
        assert "does not fit" in await bind(client, "p", "node-0", uid=real["metadata"]["uid"])


async def test_a_filter_reads_its_pod_once(monkeypatch: Any) -> None:
    """look_up_member and the filter ask for the same body's request: the second asks nothing of the
    watch's object or the body again, and an invalid pod is refused both times with its reason."""
    backend = backend_with(ours(pod("p", core=60, mem="10Gi")))
    async with running(backend) as (_, runtime):
        await settle(runtime, backend)
        requests = runtime.extender.requests
        raw = msgspec.json.encode(stored(backend, "p"))
        first = requests.request_of(raw)
        with monkeypatch.context() as m:
            m.setattr(requests, "watched_version", lambda pod_id: pytest.fail("read the watch again"))
            assert requests.request_of(bytes(raw)) == first
        bad = copy.deepcopy(stored(backend, "p"))
        bad["metadata"]["uid"] = "other"
        bad["spec"]["containers"][0]["resources"]["limits"]["koordinator.sh/gpu-core"] = "-5"
        raw_bad = msgspec.json.encode(bad)
        for _ in range(2):
            with pytest.raises(InvalidInput):
                requests.request_of(raw_bad)


async def test_a_pending_pod_is_read_when_the_watch_delivers_it_not_in_its_filter(monkeypatch: Any) -> None:
    backend = backend_with()
    async with running(backend) as (client, runtime):
        backend.apply(ours(pod("p", core=60, mem="10Gi")))  # created after the state synced
        await settle(runtime, backend)
        requests = runtime.extender.requests
        parsed: list[str] = []
        real = requests.parse

        def counting(obj: dict[str, Any]) -> Any:
            parsed.append(obj["metadata"]["name"])
            return real(obj)

        monkeypatch.setattr(requests, "parse", counting)
        out = await post(client, "/filter", names_body(stored(backend, "p"), ["node-0", "node-1"]))
        assert out["NodeNames"] and parsed == []
        assert await bind(client, "p", out["NodeNames"][0]) == "" and parsed == []
