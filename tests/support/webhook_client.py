"""A real HTTPS webhook server (aiohttp on loopback, in a thread) and a client that trusts its CA.

Tests talk to the server with a plain ``http.client`` connection over TLS, so hypothesis can drive
it from ordinary (sync) tests.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import uuid
from pathlib import Path
from typing import Any


class Client:
    """POSTs AdmissionReviews over one keep-alive TLS connection (reconnecting when needed)."""

    def __init__(self, port: int, ca: Path, host: str = "localhost") -> None:
        self.port = port
        self.host = host
        self.ctx = ssl.create_default_context(cafile=str(ca))
        self.conn: http.client.HTTPSConnection | None = None

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=10)
            try:
                headers = {"Content-Type": "application/json"} if body is not None else {}
                self.conn.request(method, path, body=body, headers=headers)
                resp = self.conn.getresponse()
                return resp.status, resp.read()
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        return self.request("POST", path, body)

    def review(self, path: str, pod: Any, **request: Any) -> dict[str, Any]:
        """Send ``pod`` in a CREATE review and return the ``response`` (asserting the envelope)."""
        uid = request.pop("uid", str(uuid.uuid4()))
        body = admission_review(pod, uid=uid, **request)
        status, raw = self.post(path, json.dumps(body).encode())
        assert status == 200, raw
        doc = json.loads(raw)
        assert doc["apiVersion"] == "admission.k8s.io/v1"
        assert doc["kind"] == "AdmissionReview"
        assert doc["response"]["uid"] == uid
        return doc["response"]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


def admission_review(
    pod: Any,
    *,
    uid: str = "3f1c6b7e-0000-4000-8000-000000000001",
    operation: str = "CREATE",
    namespace: str = "default",
    kind: str = "Pod",
    name: str = "",
    username: str = "system:serviceaccount:default:test",
    old: Any = None,
) -> dict[str, Any]:
    """An AdmissionReview as the API server sends it for a pod."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": kind},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": name,
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": username},
            "object": pod,
            "oldObject": old,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def decode_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch of a mutate response ([] when none)."""
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    assert isinstance(ops, list)
    return ops
