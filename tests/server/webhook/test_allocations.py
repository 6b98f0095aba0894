"""Users must not write allocations (issue 12): a pod CREATE carrying ``devshare.io/allocation`` or
another allocation annotation devshare writes is refused unless devshare's own identity makes it,
and an UPDATE that changes them is refused for everyone else. Through the webhook's HTTP API."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from devshare.model import dialects, names
from devshare.model.dialects import koordinator
from devshare.server.webhook.allocations import DEFAULT_WRITERS, refuse_allocation_write
from devshare.server.webhook.app import WebhookConfig
from support.webhook_client import Client

EXTENDER, AGENT = DEFAULT_WRITERS
USER = "alice"
ALLOC = json.dumps({"node": "gpu-node-1", "containers": [{"name": "main", "devices": [
    {"type": "gpu", "minor": 0, "id": "GPU-0", "core": 100, "memory": 85899345920}]}]})


def gpu_pod(annotations: dict[str, str] | None = None, *, node: str | None = None,
            labels: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x", "resources": {"limits": {
        "koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "100"}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "team", "annotations": dict(annotations or {}),
                         "labels": dict(labels or {})}, "spec": spec}


KEYS = sorted([*dialects.allocation_annotations(), *(p + "main" for p in dialects.allocation_prefixes())])


@pytest.mark.parametrize("key", KEYS)
def test_a_user_cannot_create_a_pod_carrying_an_allocation(client: Client, key: str) -> None:
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "annotations": {key: ALLOC}},
             "spec": {"containers": [{"name": "main", "image": "x"}]}}  # with or without a device request
    for pod in (gpu_pod({key: ALLOC}, node="gpu-node-1"), plain):
        verdict = client.review("/validate", pod, username=USER, namespace="team")
        assert verdict["allowed"] is False
        message = verdict["status"]["message"]
        assert message.startswith("devshare: pod team/p: annotation(s) " + key)
        assert "may only be written by devshare" in message and "not by alice" in message


def test_the_opt_out_label_does_not_let_a_pod_bring_its_own_allocation(client: Client) -> None:
    pod = gpu_pod({names.ALLOCATION: ALLOC}, node="gpu-node-1", labels={"devshare.io/webhook": "disabled"})
    assert client.review("/validate", pod, username=USER)["allowed"] is False


def test_devshare_itself_may_write_and_other_pods_pass(client: Client, webhook_config: WebhookConfig) -> None:
    before = webhook_config.metrics.rejections.labels("allocation-write")._value.get()
    assert client.review("/validate", gpu_pod({names.ALLOCATION: ALLOC}), username=EXTENDER)["allowed"] is True
    assert client.review("/validate", gpu_pod({"team.example/owner": "x"}), username=USER)["allowed"] is True
    assert client.review("/validate", gpu_pod({names.ALLOCATION: ALLOC}), username=USER)["allowed"] is False
    assert webhook_config.metrics.rejections.labels("allocation-write")._value.get() == before + 1


def test_updates_may_not_change_an_allocation_unless_devshare_makes_them(client: Client) -> None:
    bound = gpu_pod({names.ALLOCATION: ALLOC, koordinator.KOORD_DEVICE_ALLOCATED: "{}"}, node="gpu-node-1")
    relabelled = copy.deepcopy(bound)
    relabelled["metadata"]["labels"] = {"tier": "gold"}
    assert client.review("/validate", relabelled, operation="UPDATE", old=bound, username=USER)["allowed"] is True

    for change in ({names.ALLOCATION: ALLOC.replace('"core": 100', '"core": 5')},  # rewritten
                   {names.ALLOCATION: None},  # removed
                   {names.ASSIGNED: "true"}):  # added
        forged = copy.deepcopy(bound)
        for k, v in change.items():
            if v is None:
                forged["metadata"]["annotations"].pop(k)
            else:
                forged["metadata"]["annotations"][k] = v
        verdict = client.review("/validate", forged, operation="UPDATE", old=bound, username=USER)
        assert verdict["allowed"] is False, change
        assert f"annotation(s) {next(iter(change))} may only be changed by devshare" in verdict["status"]["message"]
        # the node agent marks pods assigned
        assert client.review("/validate", forged, operation="UPDATE", old=bound, username=AGENT)["allowed"] is True


def test_the_rule_itself() -> None:
    writers = ("devshare",)
    assert refuse_allocation_write("DELETE", USER, None, gpu_pod({names.ALLOCATION: ALLOC}), writers) is None
    assert refuse_allocation_write("CREATE", USER, {"metadata": {"annotations": "junk"}}, None, writers) is None
    reason = refuse_allocation_write("CREATE", "", gpu_pod({names.ALLOCATION: ALLOC}), None, writers)
    assert reason is not None and "not by an anonymous user" in reason
