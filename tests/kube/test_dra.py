"""What DRA needs from the API server (kube/dra.py): the paths of its kinds, and LiveDraApi's verbs over
the one API client, against the fake API server (real REST and watch, resourceVersion preconditions).
The controller on top of it: tests/server/dra/test_controller.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from devshare.kube.dra import DRA_KINDS, PENDING_PODS, RESOURCES, LiveDraApi, path_of
from devshare.kube.errors import Conflict, NotFound
from devshare.kube.rest import InvalidName, KubeClient
from devshare.model import dra
from fakeapi.server import FakeApiServer
from support.waiting import settled


@pytest.fixture
async def api(fake_kubeconfig: Path) -> AsyncIterator[LiveDraApi]:
    client = KubeClient.connect(fake_kubeconfig, watch_timeout=30)
    try:
        yield LiveDraApi(client)
    finally:
        await client.close()


def claim(name: str, ns: str = "default") -> dict[str, Any]:
    return {"apiVersion": dra.API_VERSION, "kind": "ResourceClaim", "metadata": {"name": name, "namespace": ns},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": dra.CLASS_GPU}}]}}}


def pod(name: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def test_paths() -> None:
    assert path_of("resourceclaims") == "/apis/resource.k8s.io/v1/resourceclaims"  # every namespace's
    assert path_of("resourceclaims", "team", "c1") == "/apis/resource.k8s.io/v1/namespaces/team/resourceclaims/c1"
    assert (path_of("resourceclaims", "team", "c1", "status")
            == "/apis/resource.k8s.io/v1/namespaces/team/resourceclaims/c1/status")
    # cluster-scoped kinds: a namespace given (a slice's metadata may carry none, or one) stays out of the path
    assert path_of("resourceslices", "default", "n1-gpu") == "/apis/resource.k8s.io/v1/resourceslices/n1-gpu"
    assert path_of("deviceclasses", None, dra.CLASS_GPU) == f"/apis/resource.k8s.io/v1/deviceclasses/{dra.CLASS_GPU}"
    assert path_of("pods", "default", "p") == "/api/v1/namespaces/default/pods/p"
    assert set(DRA_KINDS) <= set(RESOURCES)


def test_a_bad_name_is_refused_before_any_request() -> None:
    with pytest.raises(InvalidName, match=r"not a valid name of resourceclaims .*no request was sent"):
        path_of("resourceclaims", "default", "../secrets")
    with pytest.raises(InvalidName, match=r"not a valid Kubernetes namespace .*no request was sent"):
        path_of("resourceclaims", "Not_A_Namespace", "c1")


async def test_pods_are_listed_and_watched_pending_only(fake_api: FakeApiServer, api: LiveDraApi) -> None:
    fake_api.put(pod("waiting"))
    fake_api.put(pod("running", node="n1"))
    listed = await api.list("pods")
    assert [p["metadata"]["name"] for p in listed.items] == ["waiting"]
    [(_, path, query)] = fake_api.requests
    assert path == "/api/v1/pods" and query["fieldSelector"] == PENDING_PODS
    events = api.watch("pods", listed.resource_version)
    fake_api.put(pod("later"))
    event = await settled(anext(events))
    assert event.type == "ADDED" and event.object["metadata"]["name"] == "later"
    await events.aclose()
    [(_, _, query)] = [r for r in fake_api.requests if r[2].get("watch") == "true"]
    assert query["fieldSelector"] == PENDING_PODS
    await api.list("resourceclaims")
    _, path, query = fake_api.requests[-1]
    assert path == "/apis/resource.k8s.io/v1/resourceclaims" and "fieldSelector" not in query


async def test_a_claims_life(fake_api: FakeApiServer, api: LiveDraApi) -> None:
    created = await api.create("resourceclaims", claim("c1", "team"))
    assert await api.get("resourceclaims", "team", "c1") == created
    assert await api.get("resourceclaims", "team", "nobody") is None
    allocated = {**created, "status": {"allocation": {"devices": {"results": []}}}}
    stored = await api.update_status(allocated)
    assert stored["status"] == allocated["status"]
    assert fake_api.requests[-1][:2] == ("PUT", "/apis/resource.k8s.io/v1/namespaces/team/resourceclaims/c1/status")
    with pytest.raises(Conflict):  # the resourceVersion read is the precondition
        await api.update_status({**created, "status": {}})
    relabelled = {**stored, "metadata": {**stored["metadata"], "labels": {"a": "b"}}}
    assert (await api.update("resourceclaims", relabelled))["metadata"]["labels"] == {"a": "b"}
    await api.delete("resourceclaims", "team", "c1")
    assert fake_api.get("resourceclaims", "team/c1") is None
    with pytest.raises(NotFound):
        await api.delete("resourceclaims", "team", "c1")


async def test_events_are_recorded(fake_api: FakeApiServer, api: LiveDraApi) -> None:
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "p.1", "namespace": "default"},
             "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p"}, "reason": "X",
             "message": "y", "type": "Warning"}
    await api.record_event("default", event)
    assert fake_api.get("events", "default/p.1") is not None


async def test_an_api_server_without_dra_says_which_version_serves_it(fake_api: FakeApiServer,
                                                                      api: LiveDraApi) -> None:
    fake_api.fail_next("list", "resourceslices", code=404)
    with pytest.raises(NotFound) as e:
        await api.list("resourceslices")
    assert str(e.value) == ("/apis/resource.k8s.io/v1/resourceslices: the API server does not serve it "
                            "(Kubernetes 1.34+ serves resource.k8s.io/v1)")
    assert e.value.code == 404
