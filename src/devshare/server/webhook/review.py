"""AdmissionReview (``admission.k8s.io/v1``) in and out.

:func:`read_review` turns a request body into a :class:`Review` or raises :class:`BadReview` (the
server answers 400 with its message); :func:`allow`, :func:`deny` and :func:`patch` build the
response body, always echoing the request's uid and apiVersion.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import msgspec

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
KIND = "AdmissionReview"

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


class BadReview(ValueError):
    """A body that is not an AdmissionReview the webhook can answer (``uid``: the request's, when
    it could be read, echoed in the 400 answer)."""

    def __init__(self, message: str, uid: str = "") -> None:
        super().__init__(message)
        self.uid = uid


def bad_review_body(error: BadReview) -> bytes:
    """The body of the 400 answer: ``{"message": ..., "uid": ...}``."""
    body: dict[str, str] = {"message": str(error)}
    if error.uid:
        body["uid"] = error.uid
    return _encode(body)


@dataclass(frozen=True, slots=True)
class Review:
    """The parts of an AdmissionReview request the webhook uses."""

    api_version: str
    uid: str
    operation: str  # CREATE | UPDATE | DELETE | CONNECT
    kind: str  # request.kind.kind, e.g. "Pod"
    namespace: str
    name: str
    object: Any  # request.object (a dict for CREATE/UPDATE of a Pod)
    sub_resource: str = ""
    username: str = ""  # request.userInfo.username: who makes the request
    old_object: Any = None  # request.oldObject (UPDATE)


def _field(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadReview(f"{where}.{key} must be a string, got {type(value).__name__}")
    return value


def read_review(body: bytes) -> Review:
    """Parse a request body; raise :class:`BadReview` saying what is wrong with it."""
    if not body:
        raise BadReview("empty body: expected an AdmissionReview (admission.k8s.io/v1) as JSON")
    try:
        doc = _decode(body)
    except msgspec.DecodeError as e:
        raise BadReview(f"body is not valid JSON: {e}") from None
    except UnicodeDecodeError as e:
        raise BadReview(f"body is not valid UTF-8 ({e}): JSON text must be UTF-8") from None
    except RecursionError:
        raise BadReview("body is nested too deeply to be an AdmissionReview") from None
    if not isinstance(doc, dict):
        raise BadReview(f"expected an AdmissionReview object, got a JSON {type(doc).__name__}")
    request = doc.get("request")
    if not isinstance(request, dict):
        raise BadReview("request is missing: an AdmissionReview to judge must carry a request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview("request.uid is missing or not a string: the response must echo it")
    api_version = doc.get("apiVersion", API_VERSIONS[0])
    if api_version not in API_VERSIONS:
        raise BadReview(f"apiVersion {api_version!r} is not supported: send admission.k8s.io/v1", uid)
    kind = doc.get("kind", KIND)
    if kind != KIND:
        raise BadReview(f"kind {kind!r} is not {KIND}", uid)
    kind_obj = request.get("kind") or {}
    if not isinstance(kind_obj, dict):
        raise BadReview("request.kind must be an object like {group, version, kind}", uid)
    try:
        operation = _field(request, "operation", "request")
        review = Review(
            api_version=api_version,
            uid=uid,
            operation=operation,
            kind=_field(kind_obj, "kind", "request.kind"),
            namespace=_field(request, "namespace", "request"),
            name=_field(request, "name", "request"),
            object=request.get("object"),
            sub_resource=_field(request, "subResource", "request"),
            username=_field(_user_info(request, uid), "username", "request.userInfo"),
            old_object=request.get("oldObject"),
        )
    except BadReview as e:
        raise BadReview(str(e), uid) from None
    if operation in ("CREATE", "UPDATE") and not isinstance(review.object, dict):
        raise BadReview(
            f"request.object must be the {operation.lower()}d object, got {type(review.object).__name__}", uid
        )
    return review


def _user_info(request: dict[str, Any], uid: str) -> dict[str, Any]:
    info = request.get("userInfo")
    if info is None:
        return {}
    if not isinstance(info, dict):
        raise BadReview("request.userInfo must be an object like {username, groups}", uid)
    return info


def _wrap(review: Review, response: dict[str, Any]) -> bytes:
    response["uid"] = review.uid
    return _encode({"apiVersion": review.api_version, "kind": KIND, "response": response})


def allow(review: Review, warnings: list[str] | None = None) -> bytes:
    """Allowed, unchanged."""
    response: dict[str, Any] = {"allowed": True}
    if warnings:
        response["warnings"] = warnings
    return _wrap(review, response)


def deny(review: Review, message: str, *, code: int = 403, reason: str = "Forbidden") -> bytes:
    """Refused, with a message the user sees in kubectl's error."""
    return _wrap(
        review,
        {"allowed": False, "status": {"status": "Failure", "code": code, "reason": reason, "message": message}},
    )


def patch(review: Review, ops: list[dict[str, Any]], warnings: list[str] | None = None) -> bytes:
    """Allowed with an RFC 6902 JSON patch (base64 in the response, patchType JSONPatch)."""
    if not ops:
        return allow(review, warnings)
    response: dict[str, Any] = {
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(_encode(ops)).decode(),
    }
    if warnings:
        response["warnings"] = warnings
    return _wrap(review, response)
