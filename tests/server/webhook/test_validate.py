"""POST /validate over HTTPS: every example pod of seeds 000, 001, 002, and the pod-level rules."""

from __future__ import annotations

from typing import Any

import pytest

from devshare.server.webhook.app import WebhookConfig
from support.webhook_client import Client
from support.webhook_pods import (
    ALIYUN_ALLOWED,
    ALIYUN_REFUSED,
    POD_REFUSED,
    SEED000_ALLOWED,
    SEED000_MULTI_REFUSED,
    SEED000_REFUSED,
    SEED001_ALLOWED,
    SEED001_REFUSED,
    pod,
)

REFUSED = SEED000_REFUSED + SEED000_MULTI_REFUSED + SEED001_REFUSED + ALIYUN_REFUSED + POD_REFUSED
ALLOWED = SEED000_ALLOWED + SEED001_ALLOWED + ALIYUN_ALLOWED


@pytest.mark.parametrize(("title", "pod", "words"), REFUSED, ids=[c[0] for c in REFUSED])
def test_refused_with_the_reason(client: Client, title: str, pod: dict[str, Any], words: list[str]) -> None:
    response = client.review("/validate", pod)
    assert response["allowed"] is False
    status = response["status"]
    assert status["code"] == 403
    message = status["message"]
    assert message.startswith("devshare: ")
    for w in words:
        assert w in message, (w, message)


@pytest.mark.parametrize(("title", "pod"), ALLOWED, ids=[c[0] for c in ALLOWED])
def test_allowed(client: Client, title: str, pod: dict[str, Any]) -> None:
    response = client.review("/validate", pod)
    assert response == {"uid": response["uid"], "allowed": True}


def test_every_problem_is_reported(client: Client) -> None:
    # seed 000 normal rule 2's example breaks rules 2 and 3 at once: both are said
    message = client.review("/validate", SEED000_REFUSED[1][1])["status"]["message"]
    assert "2 problems" in message
    assert "(1)" in message and "(2)" in message


def test_device_type_no_node_has(client: Client) -> None:
    # the test cluster has gpu and rdma only
    response = client.review("/validate", pod({"koordinator.sh/fpga": "100"}))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "'fpga'" in message and "gpu, rdma" in message
    assert client.review("/validate", pod({"koordinator.sh/rdma": "100"}))["allowed"] is True


@pytest.mark.parametrize(
    "other",
    [
        pod({"cpu": "2", "memory": "1Gi"}),
        pod(),
        pod({"nvidia.com/gpu": "0"}),
        pod({"example.com/foo": "-3"}, node_name="node-1"),
    ],
    ids=["cpu-memory", "no-resources", "zero-gpus", "other-extended-resource-with-nodeName"],
)
def test_other_pods_pass_untouched(client: Client, webhook_config: WebhookConfig, other: dict[str, Any]) -> None:
    before = webhook_config.metrics.count("validate", "skipped")
    assert client.review("/validate", other, uid="u-1") == {"uid": "u-1", "allowed": True}
    assert webhook_config.metrics.count("validate", "skipped") == before + 1


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_only_create_is_judged(client: Client, operation: str) -> None:
    bad = SEED000_REFUSED[0][1]
    assert client.review("/validate", bad, operation=operation)["allowed"] is True


def test_other_kinds_are_not_judged(client: Client) -> None:
    assert client.review("/validate", {"metadata": {"name": "x"}}, kind="ConfigMap")["allowed"] is True


def test_generated_name_and_namespace_from_the_review(client: Client) -> None:
    p = pod({"vke.volcengine.com/mgpu-core": "-20", "vke.volcengine.com/mgpu-memory": "1024"})
    del p["metadata"]["name"]
    del p["metadata"]["namespace"]
    p["metadata"]["generateName"] = "train-"
    response = client.review("/validate", p, namespace="team-a")
    assert response["allowed"] is False
    assert "-20" in response["status"]["message"]


def test_limits_only(client: Client) -> None:
    p = pod({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"})
    del p["spec"]["containers"][0]["resources"]["requests"]
    assert client.review("/validate", p)["allowed"] is True
    p["spec"]["containers"][0]["resources"]["limits"]["koordinator.sh/gpu-core"] = "0.5"
    assert client.review("/validate", p)["allowed"] is False


def test_gpu_selection_annotations_are_checked(client: Client) -> None:
    """HAMi's nvidia.com/use-gpuuuid and friends: a malformed list is refused at creation, with where."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {
        "nvidia.com/use-gputype": "A100,", "nvidia.com/nouse-gpuuuid": "GPU-1"}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    verdict = client.review("/validate", pod)
    assert verdict["allowed"] is False
    assert "annotation nvidia.com/use-gputype: has an empty entry in 'A100,'" in verdict["status"]["message"]
    pod["metadata"]["annotations"]["nvidia.com/use-gputype"] = "A100"
    assert client.review("/validate", pod)["allowed"] is True
