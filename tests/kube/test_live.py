"""LiveBackend against the fake API server: requests, and errors mapped to the backend's errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from devshare.kube.errors import BackendError, Conflict, Gone, NotFound, Unavailable
from devshare.kube.live import LiveBackend
from devshare.model.errors import InvalidInput
from fakeapi.server import FakeApiServer
from support.kube import node, pod


async def test_pods_are_listed_in_every_namespace(fake_api: FakeApiServer, live_backend: LiveBackend) -> None:
    fake_api.put(pod("a", ns="one"))
    fake_api.put(pod("b", ns="two"))
    listed = await live_backend.list("pods")
    assert sorted(p["metadata"]["namespace"] for p in listed.items) == ["one", "two"]
    assert listed.resource_version == str(fake_api.store.rv)
    assert all(type(p) is dict for p in listed.items)


async def test_patch_merges_annotations(fake_api: FakeApiServer, live_backend: LiveBackend) -> None:
    fake_api.put(pod("a", annotations={"keep": "1", "drop": "2"}))
    out = await live_backend.patch_pod_annotations("default", "a", {"new": "3", "drop": None})
    assert out["metadata"]["annotations"] == {"keep": "1", "new": "3"}
    (_method, path, _), = [r for r in fake_api.requests if r[0] == "PATCH"]
    assert path == "/api/v1/namespaces/default/pods/a"
    with pytest.raises(NotFound):
        await live_backend.patch_pod_annotations("default", "nobody", {"x": "1"})


async def test_bind_creates_the_binding_once(fake_api: FakeApiServer, live_backend: LiveBackend) -> None:
    created = fake_api.put(pod("a"))
    with pytest.raises(Conflict):
        await live_backend.bind_pod("default", "a", "n1", uid="another-uid")
    await live_backend.bind_pod("default", "a", "n1", uid=created["metadata"]["uid"])
    bound = await live_backend.get_pod("default", "a")
    assert bound is not None and bound["spec"]["nodeName"] == "n1"
    with pytest.raises(Conflict, match="already assigned"):
        await live_backend.bind_pod("default", "a", "n2")
    with pytest.raises(NotFound):
        await live_backend.bind_pod("default", "nobody", "n1")
    assert await live_backend.get_pod("default", "nobody") is None
    assert ("POST", "/api/v1/namespaces/default/pods/a/binding", {}) in [
        (m, p, {k: v for k, v in q.items() if k != "fieldManager"}) for m, p, q in fake_api.requests]


@pytest.mark.parametrize(("code", "error"), [
    (0, Unavailable), (500, Unavailable), (503, Unavailable), (429, Unavailable),
    (403, BackendError), (404, NotFound), (409, Conflict), (410, Gone),
])
async def test_errors_are_translated(fake_api: FakeApiServer, live_backend: LiveBackend, code: int,
                                     error: type[BackendError]) -> None:
    fake_api.put(node("n1"))
    fake_api.fail_next("list", "nodes", code=code)
    with pytest.raises(error) as err:
        await live_backend.list("nodes")
    assert type(err.value) is error
    assert (await live_backend.list("nodes")).items[0]["metadata"]["name"] == "n1"


async def test_events_are_recorded(fake_api: FakeApiServer, live_backend: LiveBackend) -> None:
    await live_backend.record_event("default", {
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": "a.1"},
        "involvedObject": {"kind": "Pod", "name": "a", "namespace": "default"},
        "reason": "Scheduled", "message": "bound to n1", "type": "Normal"})
    assert fake_api.get("events", "default/a.1") is not None


async def test_unreachable_server_is_unavailable(tmp_path: Path) -> None:
    server = await FakeApiServer().start()
    kc = server.write_kubeconfig(tmp_path / "kc")
    await server.stop()
    backend = LiveBackend.connect(kc)
    try:
        with pytest.raises(Unavailable):
            await backend.list("nodes")
    finally:
        await backend.close()


def test_a_bad_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot load the cluster configuration"):
        LiveBackend.connect(tmp_path / "missing")
    (tmp_path / "kc").write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    with pytest.raises(InvalidInput):
        LiveBackend.connect(tmp_path / "kc", context="nope")


async def test_bind_writes_the_annotations_with_the_binding_and_checks_the_version(
        fake_api: FakeApiServer, live_backend: LiveBackend) -> None:
    """The binding subresource copies the Binding's annotations onto the pod in the same write and
    takes metadata.resourceVersion as a precondition (as kube-apiserver's BindingREST does; the
    e2e suite checks the real one)."""
    created = fake_api.put(pod("a"))
    rv = created["metadata"]["resourceVersion"]
    fake_api.put(pod("a", annotations={"devshare.io/allocation": "written by a user"}))  # changed since read
    with pytest.raises(Conflict, match="modified"):
        await live_backend.bind_pod("default", "a", "n1", annotations={"k": "v"}, resource_version=rv)
    current = await live_backend.get_pod("default", "a")
    assert current is not None and not current["spec"].get("nodeName")
    await live_backend.bind_pod("default", "a", "n1", annotations={"k": "v"},
                                resource_version=current["metadata"]["resourceVersion"])
    bound = await live_backend.get_pod("default", "a")
    assert bound is not None and bound["spec"]["nodeName"] == "n1"
    assert bound["metadata"]["annotations"]["k"] == "v"
