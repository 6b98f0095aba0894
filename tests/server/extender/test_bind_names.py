"""Issue 37, item 1: a /bind (or a group member's /filter) whose pod name is not a Kubernetes name never
becomes an API request. On the main branch of 2026-12 a PodName holding CRLF was written unescaped into the
request line of the bind's pod GET and became a second, authenticated request of the caller's choosing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from devshare.model import names
from fakeapi.plugin import fake_api, fake_kubeconfig, live_backend  # noqa: F401
from fakeapi.server import FakeApiServer
from support.extender import device, node, pod, post, running

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
