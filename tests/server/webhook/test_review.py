"""AdmissionReview envelopes: malformed bodies get a 400 with a message (and the uid when one can
be read), good ones are answered with the uid and apiVersion echoed."""

from __future__ import annotations

import json

import pytest

from devshare.server.webhook.review import BadReview, allow, deny, patch, read_review
from support.webhook_client import Client, admission_review
from support.webhook_pods import pod


def body(doc: object) -> bytes:
    return json.dumps(doc).encode()


GOOD = admission_review(pod({"cpu": "1"}), uid="uid-7")

MALFORMED = [
    ("empty", b"", "empty body", None),
    ("not json", b"{nope", "not valid JSON", None),
    ("a list", body([1, 2]), "got a JSON list", None),
    ("no request", body({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), "request", None),
    ("request not an object", body({**GOOD, "request": "x"}), "request", None),
    ("no uid", body({**GOOD, "request": {**GOOD["request"], "uid": None}}), "uid", None),
    ("uid a number", body({**GOOD, "request": {**GOOD["request"], "uid": 5}}), "uid", None),
    ("old apiVersion", body({**GOOD, "apiVersion": "admission.k8s.io/v2"}), "apiVersion", "uid-7"),
    ("wrong kind", body({**GOOD, "kind": "Pod"}), "kind", "uid-7"),
    ("kind not an object", body({**GOOD, "request": {**GOOD["request"], "kind": "Pod"}}), "request.kind", "uid-7"),
    ("operation a number", body({**GOOD, "request": {**GOOD["request"], "operation": 1}}), "operation", "uid-7"),
    ("object missing on CREATE", body({**GOOD, "request": {**GOOD["request"], "object": None}}), "object", "uid-7"),
    ("too deep", b"[" * 100_000 + b"]" * 100_000, "deep", None),
]


@pytest.mark.parametrize(("title", "raw", "word", "uid"), MALFORMED, ids=[m[0] for m in MALFORMED])
@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_malformed_gets_400(client: Client, path: str, title: str, raw: bytes, word: str, uid: str | None) -> None:
    status, answer = client.post(path, raw)
    assert status == 400
    doc = json.loads(answer)
    assert word in doc["message"]
    assert doc.get("uid") == uid


@pytest.mark.parametrize(("title", "raw", "word", "uid"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_read_review_says_why(title: str, raw: bytes, word: str, uid: str | None) -> None:
    with pytest.raises(BadReview, match=word) as err:
        read_review(raw)
    assert err.value.uid == (uid or "")


def test_v1beta1_is_answered_in_kind() -> None:
    review = read_review(body({**GOOD, "apiVersion": "admission.k8s.io/v1beta1"}))
    assert json.loads(allow(review))["apiVersion"] == "admission.k8s.io/v1beta1"


def test_responses() -> None:
    review = read_review(body(GOOD))
    assert review.uid == "uid-7" and review.operation == "CREATE" and review.kind == "Pod"
    assert json.loads(allow(review)) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"allowed": True, "uid": "uid-7"},
    }
    denied = json.loads(deny(review, "no"))["response"]
    assert denied["allowed"] is False
    assert denied["status"] == {"status": "Failure", "code": 403, "reason": "Forbidden", "message": "no"}
    assert json.loads(patch(review, []))["response"] == {"allowed": True, "uid": "uid-7"}
    patched = json.loads(patch(review, [{"op": "remove", "path": "/a"}], ["w"]))["response"]
    assert patched["patchType"] == "JSONPatch" and patched["warnings"] == ["w"]


def test_health_and_readiness(client: Client) -> None:
    assert client.request("GET", "/healthz") == (200, b"ok\n")
    assert client.request("GET", "/readyz") == (200, b"ok\n")
    assert client.request("GET", "/validate")[0] == 405
    assert client.request("GET", "/nothing")[0] == 404


def test_metrics(client: Client) -> None:
    client.review("/validate", pod({"vke.volcengine.com/mgpu-core": "-20", "vke.volcengine.com/mgpu-memory": "6k"}))
    client.review("/validate", pod({"koordinator.sh/gpu": "50"}, node_name="n"))
    client.review("/mutate", pod({"koordinator.sh/gpu": "50"}))
    client.post("/mutate", b"junk")
    status, text = client.request("GET", "/metrics")
    assert status == 200
    metrics = text.decode()
    for line in (
        'devshare_webhook_reviews_total{operation="validate",result="denied"}',
        'devshare_webhook_reviews_total{operation="mutate",result="patched"}',
        'devshare_webhook_reviews_total{operation="mutate",result="malformed"}',
        'devshare_webhook_rejections_total{reason="request"}',
        'devshare_webhook_rejections_total{reason="node-name"}',
        'devshare_webhook_review_seconds_bucket{le="0.001",operation="validate"}',
    ):
        assert line in metrics, line
