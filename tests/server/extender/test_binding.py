"""The bind path (server/extender/binding.py): bind trusts no caller and decides from the pod as the API
server has it (the watch's object when it is the version kube-scheduler filtered, else a read), reads
its request once, refuses a pod or node name that is not a Kubernetes name before any request (issue
37), and a bind answered after the watch saw the pod bound and finished records nothing."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import msgspec
import pytest

from devshare.kube.memory import MemoryBackend
from devshare.model import names
from devshare.model.codecs import decode_allocation
from devshare.model.errors import InvalidInput
from fakeapi.plugin import fake_api, fake_kubeconfig, live_backend  # noqa: F401
from fakeapi.server import FakeApiServer
from support.extender import bind, cluster, device, names_body, node, pod, post, running, settle


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
    """A filter and the prioritize after it ask for the same body's request: the second asks nothing of the
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


async def test_a_forged_filter_body_does_not_change_what_bind_writes() -> None:
    real = pod("p", core=60, mem="10Gi", resource_version="7")
    backend = cluster(1, gpus=1, pods=[real])
    async with running(backend) as (client, _):
        stored = backend.store.get("pods", "default/p")
        forged = pod("p", core=5, mem="1Gi", uid=stored["metadata"]["uid"],
                     resource_version=stored["metadata"]["resourceVersion"])
        out = await post(client, "/filter", names_body(forged, ["node-0"]))
        assert out["NodeNames"] == ["node-0"]
        assert await bind(client, "p", "node-0", uid=stored["metadata"]["uid"]) == ""
        written = backend.store.get("pods", "default/p")
        alloc = decode_allocation(written["metadata"]["annotations"])
        assert alloc is not None
        (grant,) = [g for _, g in alloc.grants()]
        assert grant.core_milli == 600 and grant.memory == 10 * 2**30  # the real ask, not the forged one


async def test_bind_refuses_a_pod_asking_for_no_device_of_another_scheduler() -> None:
    plain = pod("plain")
    backend = cluster(1, gpus=1, pods=[plain])
    async with running(backend) as (client, _):
        error = await bind(client, "plain", "node-0")
        assert "asks for no device devshare manages and is default-scheduler's" in error
        assert not backend.store.get("pods", "default/plain")["spec"].get("nodeName")


async def test_a_pod_asking_for_no_device_of_devshares_profile_is_placed_and_bound() -> None:
    """kube-scheduler asks about every pod of devshare's profile (deploy/scheduler): one asking for no
    device is placed by its CPU and memory, bound, and counted on its node."""
    plain = pod("plain")
    plain["spec"]["schedulerName"] = "devshare-scheduler"
    plain["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "3"}}
    backend = cluster(2, gpus=1, pods=[plain])
    for name, cpu in (("node-0", "2"), ("node-1", "4")):
        backend.store.patch("nodes", name, {"status": {"allocatable": {"cpu": cpu, "memory": "8Gi"}}})
    async with running(backend) as (client, runtime):
        out = await post(client, "/filter", names_body(plain, ["node-0", "node-1"]))
        assert out["NodeNames"] == ["node-1"] and "node-0" in out["FailedNodes"]
        assert await bind(client, "plain", "node-1") == ""
        assert backend.store.get("pods", "default/plain")["spec"]["nodeName"] == "node-1"
        row = runtime.state.row_of["node-1"]
        assert int(runtime.state.cpu_used[row]) == 3000


async def test_bind_refuses_a_node_devshare_does_not_know() -> None:
    backend = cluster(1, gpus=1, pods=[pod("p", core=50)])
    async with running(backend) as (client, _):
        error = await bind(client, "p", "no-such-node")
        assert error.startswith("node no-such-node is not known to devshare")
        assert not backend.store.get("pods", "default/p")["spec"].get("nodeName")


async def test_finished_before_the_bind_answer_stays_released() -> None:
    backend = cluster(1, gpus=1, pods=[pod("b", gpus=1)])
    async with running(backend) as (client, runtime):
        real_bind = backend.bind_pod

        async def bind_then_finish(namespace: str, name: str, node_name: str, **kw: Any) -> None:
            await real_bind(namespace, name, node_name, **kw)
            # before the Binding's answer reaches the extender, the pod runs and finishes
            backend.store.patch("pods", f"{namespace}/{name}", {"status": {"phase": "Succeeded"}})
            await settle(runtime, backend)

        backend.bind_pod = bind_then_finish  # type: ignore[method-assign]
        assert await bind(client, "b", "node-0") == ""
        await settle(runtime, backend)
        assert "default/b" not in runtime.state.pods
        r = await client.get("/inspect")
        assert [d["pods"] for n in (await r.json())["nodes"] for d in n["devices"]] == [[]]


SPLIT = ("a HTTP/1.1\r\nHost: x\r\n\r\nDELETE /api/v1/namespaces/kube-system/pods/victim HTTP/1.1\r\n"
         "Host: x\r\n\r\nGET /api/v1/namespaces/default/pods/a")


@pytest.mark.parametrize("field", ["PodName", "PodNamespace"])
async def test_a_pod_name_that_splits_the_request_is_refused(fake_api: FakeApiServer, live_backend: Any,  # noqa: F811
                                                             field: str) -> None:
    fake_api.put(node("node-0"))
    fake_api.put(device("node-0"))
    fake_api.put(pod("victim", ns="kube-system"))
    fake_api.put(pod("a", core=30))
    async with running(live_backend) as (client, _):
        body = {"PodName": "a", "PodNamespace": "default", "PodUID": "", "Node": "node-0", field: SPLIT}
        before = len(fake_api.requests)
        r = await client.post("/bind", json=body)
        answer = await r.text()
        await asyncio.sleep(0.2)  # a second request, had one been sent, would be served by now
        assert fake_api.get("pods", "kube-system/victim") is not None
        sent = [f"{m} {p}" for m, p, q in fake_api.requests[before:] if "watch" not in q]
        assert not any("kube-system" in s for s in sent), sent
        assert r.status == 400, answer
        assert "is not a Kubernetes name" in (await r.json())["error"]


async def test_a_group_members_filter_with_a_hostile_name_reads_nothing(fake_api: FakeApiServer,  # noqa: F811
                                                                        live_backend: Any) -> None:  # noqa: F811
    """A group member the watch does not know is read from the API server before its filter: not one whose
    name is not a Kubernetes name."""
    fake_api.put(node("node-0"))
    fake_api.put(device("node-0"))
    fake_api.put(pod("victim", ns="kube-system"))
    member = pod("x", core=30)
    member["metadata"].update(name=SPLIT, labels={names.GROUP_NAME: "g", names.GROUP_REPLICA: "2"})
    async with running(live_backend) as (client, _):
        before = len(fake_api.requests)
        answer = await post(client, "/filter", {"Pod": member, "Nodes": None, "NodeNames": ["node-0"]})
        assert not answer.get("NodeNames")
        assert "is not a valid Kubernetes object name" in answer["FailedAndUnresolvableNodes"]["node-0"]
        await asyncio.sleep(0.2)
        sent = [f"{m} {p}" for m, p, q in fake_api.requests[before:] if "watch" not in q]
        assert sent == [], sent
    assert fake_api.get("pods", "kube-system/victim") is not None
