"""Seed 001's upgrade webhook: the CREATE of a Binding (``pods/binding`` or ``bindings``) of a pod that
asks for devices is refused unless devshare's own identities make it; pods asking for no device,
and devshare's binds, pass. Through the webhook's HTTP API (``POST /validate-binding``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devshare.kube.memory import MemoryBackend
from devshare.model import names
from devshare.server.tls import CertReloader, ServingCert
from devshare.server.webhook.allocations import DEFAULT_TRADERS, DEFAULT_WRITERS
from devshare.server.webhook.app import WebhookConfig, make_app
from devshare.server.webhook.bindings import refuse_binding
from support.server import ServerThread
from support.webhook_client import Client

(EXTENDER,), (AGENT,) = DEFAULT_WRITERS, DEFAULT_TRADERS
USER = "alice"
OTHER_SCHEDULER = "system:kube-scheduler"


def pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team"},
            "spec": {"schedulerName": "volcano",
                     "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]}}


PODS = [pod("gpu", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"}),
        pod("mgpu", {"vke.volcengine.com/mgpu-core": "30"}),
        pod("whole", {"nvidia.com/gpu": "1"}),
        pod("plain", {"cpu": "1"}),
        pod("zero", {"nvidia.com/gpu": "0"})]


class Failing:
    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise ConnectionError("connection refused")


@pytest.fixture(scope="module")
def hook(certs: ServingCert) -> Iterator[tuple[Client, WebhookConfig]]:
    config = WebhookConfig(pods=MemoryBackend.from_objects(PODS))
    srv = ServerThread(make_app(config), CertReloader(certs.cert, certs.key).context)
    c = Client(srv.port, certs.ca_cert)
    yield c, config
    c.close()
    srv.close()


def binding(name: str, node: str = "gpu-node-1", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "team"}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}}


def review(client: Client, obj: dict[str, Any], *, username: str = USER, sub_resource: str = "binding",
           resource: str = "pods", kind: str = "Binding", operation: str = "CREATE") -> dict[str, Any]:
    uid = str(uuid.uuid4())
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "", "version": "v1", "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": resource}, "subResource": sub_resource,
        "name": obj["metadata"]["name"], "namespace": "team", "operation": operation,
        "userInfo": {"username": username}, "object": obj, "oldObject": None}}
    if not sub_resource:
        del body["request"]["subResource"]
    status, raw = client.post("/validate-binding", json.dumps(body).encode())
    assert status == 200, raw
    response: dict[str, Any] = json.loads(raw)["response"]
    assert response["uid"] == uid
    return response


@pytest.mark.parametrize("name", ["gpu", "mgpu", "whole"])
@pytest.mark.parametrize("who", [USER, OTHER_SCHEDULER])
def test_a_binding_of_a_device_pod_by_anyone_but_devshare_is_refused(hook: tuple[Client, WebhookConfig],
                                                                    name: str, who: str) -> None:
    client, _ = hook
    verdict = review(client, binding(name), username=who)
    assert verdict["allowed"] is False
    message = verdict["status"]["message"]
    assert message.startswith(f"devshare: pod team/{name} asks for ")
    assert f"not by {who}" in message and "spec.schedulerName: devshare-scheduler" in message
    assert "to node gpu-node-1" in message


def test_the_older_bindings_resource_is_judged_alike(hook: tuple[Client, WebhookConfig]) -> None:
    client, _ = hook
    assert review(client, binding("gpu"), sub_resource="", resource="bindings")["allowed"] is False
    assert review(client, binding("plain"), sub_resource="", resource="bindings")["allowed"] is True


def test_devshare_binds_device_pods(hook: tuple[Client, WebhookConfig]) -> None:
    client, _ = hook
    assert review(client, binding("gpu"), username=EXTENDER)["allowed"] is True
    # with its allocation, which the API server copies onto the pod
    alloc = binding("gpu", annotations={names.ALLOCATION: "{}"})
    assert review(client, alloc, username=EXTENDER)["allowed"] is True


def test_the_node_agent_binds_nothing(hook: tuple[Client, WebhookConfig]) -> None:
    """The agent may trade allocations of its node's pods (allocations.py), never bind a device pod."""
    client, _ = hook
    assert review(client, binding("gpu"), username=AGENT)["allowed"] is False


def test_other_pods_pass_and_refusals_are_counted(hook: tuple[Client, WebhookConfig]) -> None:
    client, config = hook
    before = config.metrics.rejections.labels("foreign-binding")._value.get()
    for name in ("plain", "zero", "no-such-pod"):  # the API server answers a missing pod's Binding itself
        assert review(client, binding(name), username=OTHER_SCHEDULER)["allowed"] is True, name
    assert review(client, binding("whole"), username=OTHER_SCHEDULER)["allowed"] is False
    assert config.metrics.rejections.labels("foreign-binding")._value.get() == before + 1
    assert config.metrics.count("validate-binding", "denied") >= 1


def test_a_binding_may_not_bring_an_allocation_whoever_the_pod_is(hook: tuple[Client, WebhookConfig]) -> None:
    client, _ = hook
    verdict = review(client, binding("plain", annotations={names.ALLOCATION: "{}"}))
    assert verdict["allowed"] is False
    assert "carries annotation(s) devshare.io/allocation" in verdict["status"]["message"]


def test_other_reviews_are_skipped(hook: tuple[Client, WebhookConfig]) -> None:
    client, _ = hook
    assert review(client, binding("gpu"), operation="UPDATE")["allowed"] is True
    assert review(client, PODS[0], kind="Pod", sub_resource="", resource="pods")["allowed"] is True


async def test_without_a_source_or_when_the_pod_cannot_be_read_it_fails_closed() -> None:
    no_source = await refuse_binding(binding("gpu"), "team", "gpu", USER, DEFAULT_WRITERS, None, "devshare-scheduler")
    assert no_source is not None and "without a cluster connection" in no_source
    failing = await refuse_binding(binding("plain"), "team", "plain", USER, DEFAULT_WRITERS, Failing(),
                                   "devshare-scheduler")
    assert failing is not None and "could not read pod team/plain" in failing and "connection refused" in failing
    # devshare's own identities never need the pod
    assert await refuse_binding(binding("gpu"), "team", "gpu", EXTENDER, DEFAULT_WRITERS, None, "x") is None
