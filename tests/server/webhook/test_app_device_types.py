"""The webhook and device types with Device objects but no dialect: a pod asking for one the
configuration names is judged like any device pod; one nobody configured is refused at creation
with the type and the fix, even when it asks for nothing devshare reads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devshare.config import API_VERSION, KIND, parse_config
from devshare.engine.build import configure_model
from devshare.server.tls import CertReloader, ServingCert
from devshare.server.webhook.app import WebhookConfig, make_app
from devshare.server.webhook.cluster import StaticDeviceTypes
from devshare.server.webhook.validate import judge
from support.server import ServerThread
from support.webhook_client import Client

NPU = "koordinator.sh/npu"


def pod(limits: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team"},
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]}}


@pytest.fixture
def client(certs: ServingCert) -> Iterator[Client]:
    srv = ServerThread(make_app(WebhookConfig(cluster=StaticDeviceTypes(frozenset({"gpu", "npu"})))),
                       CertReloader(certs.cert, certs.key).context)
    c = Client(srv.port, certs.ca_cert)
    yield c
    c.close()
    srv.close()


def test_an_unconfigured_type_is_refused_at_creation(client: Client) -> None:
    verdict = client.review("/validate", pod({NPU: "50"}))
    assert verdict["allowed"] is False
    message = verdict["status"]["message"]
    assert message.startswith(f"devshare: asks for {NPU}, which no dialect of devshare reads: nodes list npu devices")
    assert "deviceTypes: {npu: {resources: [koordinator.sh/npu]}}" in message
    # beside a GPU ask too, with the GPU's problems if any
    mixed = client.review("/validate", pod({NPU: "50", "nvidia.com/gpu": "1"}))
    assert mixed["allowed"] is False and "no dialect of devshare reads" in mixed["status"]["message"]
    # a name that is no device type of the cluster is none of devshare's business
    assert client.review("/validate", pod({"example.com/dongle": "1"}))["allowed"] is True
    assert client.review("/validate", pod({NPU: "0"}))["allowed"] is True


def test_a_configured_type_is_judged_like_any_device_pod(client: Client) -> None:
    configure_model(parse_config({"apiVersion": API_VERSION, "kind": KIND,
                                  "deviceTypes": {"npu": {"resources": [NPU]}}}))
    assert client.review("/validate", pod({NPU: "50"}))["allowed"] is True
    bad = client.review("/validate", pod({NPU: "150"}))
    assert bad["allowed"] is False and "must be a multiple of 100" in bad["status"]["message"]
    mutated = client.review("/mutate", pod({NPU: "50"}))
    assert mutated["allowed"] is True and "patch" in mutated  # schedulerName set: it is a device pod now
    disabled = parse_config({"apiVersion": API_VERSION, "kind": KIND,
                             "deviceTypes": {"npu": {"enabled": False, "resources": [NPU]}}})
    configure_model(disabled)
    (problem,) = judge(pod({NPU: "50"}), None, disabled.device_types.disabled())
    assert "deviceTypes.npu: false" in problem.message
