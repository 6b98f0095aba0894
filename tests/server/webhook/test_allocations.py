"""Users must not write allocations (issue 12): a pod CREATE carrying ``devshare.io/allocation`` or
another allocation annotation devshare writes is refused unless devshare's own identity makes it,
and an UPDATE that changes them is refused for everyone else. Through the webhook's HTTP API."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from devshare.model import dialects, names, trade
from devshare.model.dialects import koordinator_names
from devshare.server.webhook.allocations import DEFAULT_TRADERS, DEFAULT_WRITERS, refuse_allocation_write
from devshare.server.webhook.app import WebhookConfig
from support.webhook_client import Client
from support.webhook_pods import StaticPods

(EXTENDER,), (AGENT,) = DEFAULT_WRITERS, DEFAULT_TRADERS
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
    bound = gpu_pod({names.ALLOCATION: ALLOC, koordinator_names.KOORD_DEVICE_ALLOCATED: "{}"}, node="gpu-node-1")
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
        # the node agent marks pods assigned, and changes an allocation only by a trade
        agent = client.review("/validate", forged, operation="UPDATE", old=bound, username=AGENT)
        assert agent["allowed"] is (next(iter(change)) == names.ASSIGNED), change
        if not agent["allowed"]:
            assert "the node agent may only set devshare.io/assigned" in agent["status"]["message"]


def test_the_rule_itself() -> None:
    writers = ("devshare",)
    assert refuse_allocation_write("DELETE", USER, None, gpu_pod({names.ALLOCATION: ALLOC}), writers) is None
    assert refuse_allocation_write("CREATE", USER, {"metadata": {"annotations": "junk"}}, None, writers) is None
    reason = refuse_allocation_write("CREATE", "", gpu_pod({names.ALLOCATION: ALLOC}), None, writers)
    assert reason is not None and "not by an anonymous user" in reason


# ---- trades (issue 13): the node agent exchanges the allocations of two identical pods of its node


def replica(name: str, minor: int, *, uid: str | None = None, node: str = "gpu-node-1",
            ns: str = "team") -> dict[str, Any]:
    alloc = ALLOC.replace('"minor": 0, "id": "GPU-0"', f'"minor": {minor}, "id": "GPU-{minor}"')
    koord = f'{{"gpu": [{{"minor": {minor}}}]}}'
    p = gpu_pod({names.ALLOCATION: alloc, koordinator_names.KOORD_DEVICE_ALLOCATED: koord}, node=node)
    p["metadata"].update(name=name, uid=uid or f"uid-{name}", namespace=ns)
    return p


def take(pod: dict[str, Any], partner: dict[str, Any]) -> dict[str, Any]:
    """``pod`` after its trade write: ``partner``'s allocation, tagged."""
    out = copy.deepcopy(pod)
    ann = out["metadata"]["annotations"]
    for k, v in trade.leg(ann, partner["metadata"]["annotations"], partner["metadata"]["uid"]).items():
        if v is None:
            ann.pop(k, None)
        else:
            ann[k] = v
    return out


@pytest.fixture
def pods(webhook_config: WebhookConfig) -> Any:
    """The pods the webhook finds on the node (a trade's partner)."""
    found = StaticPods([])
    webhook_config.pods = found
    yield found
    webhook_config.pods = None


def test_the_agent_trades_identical_pods_exactly(client: Client, pods: StaticPods) -> None:
    a, b = replica("a", 0), replica("b", 1)
    pods.pods = [a, b]
    first = take(a, b)
    assert client.review("/validate", first, operation="UPDATE", old=a, username=AGENT,
                         namespace="team")["allowed"] is True
    pods.pods = [first, b]
    second = take(b, a)  # b takes a's former allocation
    assert client.review("/validate", second, operation="UPDATE", old=b, username=AGENT,
                         namespace="team")["allowed"] is True
    # nobody else may, not even tagged
    assert client.review("/validate", first, operation="UPDATE", old=a, username=USER,
                         namespace="team")["allowed"] is False


@pytest.mark.parametrize("case", ["untagged", "not-the-partners", "partner-elsewhere", "other-namespace",
                                  "different-ask", "no-partner", "second-leg-forged", "group"])
def test_anything_but_an_exact_trade_is_refused(client: Client, pods: StaticPods, case: str) -> None:
    a, b, c = replica("a", 0), replica("b", 1), replica("c", 2)
    pods.pods = [a, b, c]
    new = take(a, b)
    expect = "not an exchange"
    if case == "untagged":
        del new["metadata"]["annotations"][names.TRADE]
        expect = "the node agent may only set devshare.io/assigned, ALIYUN_COM_GPU_MEM_ASSIGNED, or trade"
    elif case == "not-the-partners":
        new = take(a, c)
        new["metadata"]["annotations"][names.TRADE] = "uid-b"  # c's allocation, tagged b
    elif case == "partner-elsewhere":
        pods.pods = [a, replica("b", 1, node="gpu-node-2"), c]
        expect = "is not another pod of namespace team on node gpu-node-1"
    elif case == "other-namespace":
        pods.pods = [a, replica("b", 1, ns="other"), c]  # the webhook looks in a's namespace only
        expect = "is not another pod"
    elif case == "different-ask":
        bigger = replica("b", 1)
        bigger["spec"]["containers"][0]["resources"]["limits"]["koordinator.sh/gpu-core"] = "50"
        pods.pods = [a, bigger, c]
        new = take(a, bigger)
        expect = "only identical pods trade"
    elif case == "no-partner":
        pods.pods = [a]
        expect = "is not another pod"
    elif case == "second-leg-forged":
        new = take(b, c)  # b claims a took its allocation (a did not) and takes c's
        new["metadata"]["annotations"][names.TRADE] = "uid-a"
        verdict = client.review("/validate", new, operation="UPDATE", old=b, username=AGENT, namespace="team")
        assert verdict["allowed"] is False and "not an exchange" in verdict["status"]["message"]
        return
    elif case == "group":
        for p in (a, b):
            p["metadata"]["labels"] = {names.GROUP_NAME: "g"}
        new = take(a, b)
        expect = "only identical pods trade"
    verdict = client.review("/validate", new, operation="UPDATE", old=a, username=AGENT, namespace="team")
    assert verdict["allowed"] is False, case
    assert expect in verdict["status"]["message"], verdict["status"]["message"]


def test_trades_need_a_pod_source() -> None:
    a, b = replica("a", 0), replica("b", 1)
    reason = refuse_allocation_write("UPDATE", AGENT, take(a, b), a, DEFAULT_WRITERS, DEFAULT_TRADERS, None)
    assert reason is not None and "cannot look up the trade's partner" in reason
    assert refuse_allocation_write("UPDATE", AGENT, take(a, b), a, DEFAULT_WRITERS, DEFAULT_TRADERS, [a, b]) is None
