"""What the validating webhook refuses, and why.

The rules on the request itself (seed 000's mGPU rules, seed 001's combinations, Aliyun, mixed
dialects) are the model's: :func:`devshare.model.pod.validate_pod`, the same function the
scheduler relies on. This module only adds what needs more than the pod: a device type no node
in the cluster has, or one some node has but no dialect reads (a type with Device objects that
the configuration file does not name: it would be placed reserving nothing), both only with a
:class:`DeviceTypes` source.

(``spec.nodeName`` on a device pod is refused by :func:`validate_pod` itself; its problems are
counted under their own reason class for the metrics.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devshare.engine.refusals import refuse_dialects, refuse_disabled, refuse_unconfigured
from devshare.model.errors import InvalidInput
from devshare.model.pod import parse_pod, validate_pod
from devshare.server.webhook.cluster import DeviceTypes

# reason classes (the metrics label)
REQUEST = "request"
NODE_NAME = "node-name"
DEVICE_TYPE = "device-type"
DIALECT = "dialect"


@dataclass(frozen=True, slots=True)
class Problem:
    reason: str  # REQUEST | NODE_NAME | DEVICE_TYPE | DIALECT
    message: str


def with_identity(pod: dict[str, Any], namespace: str, name: str) -> dict[str, Any]:
    """The pod with metadata.namespace/name filled from the review when absent (a shallow copy).

    Pods made by controllers arrive with only ``generateName``; the namespace may only be in the
    review."""
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    if meta.get("namespace") and meta.get("name"):
        return pod
    filled = dict(meta)
    if not filled.get("namespace"):
        filled["namespace"] = namespace or "default"
    if not filled.get("name"):
        generate = meta.get("generateName")
        filled["name"] = name or (f"{generate}<generated>" if isinstance(generate, str) else "<unnamed>")
    return {**pod, "metadata": filled}


def _reason(message: str) -> str:
    """The metrics class of a model problem (its field comes first: "spec.nodeName: ...")."""
    return NODE_NAME if message.startswith("spec.nodeName") else REQUEST


def judge(pod: dict[str, Any], cluster: DeviceTypes | None = None,
          disabled: frozenset[str] = frozenset(), disabled_dialects: frozenset[str] = frozenset()) -> list[Problem]:
    """Every reason to refuse ``pod`` (a pod that asks for managed devices); empty = allowed.
    ``disabled``: device types the configuration file switches off (deviceTypes); ``disabled_dialects``:
    dialects it switches off (dialects)."""
    problems = [Problem(_reason(p), p) for p in validate_pod(pod)]
    off = refuse_dialects(pod, disabled_dialects)
    if off:
        problems.append(Problem(DIALECT, off))
    known = cluster.known_types() if cluster is not None else None
    unconfigured = refuse_unconfigured(pod, known)
    if unconfigured:
        problems.append(Problem(DEVICE_TYPE, unconfigured))
    if problems or (known is None and not disabled):
        return problems
    try:
        request = parse_pod(pod)
    except InvalidInput as e:  # validate_pod and parse_pod should agree; never let it become a 500
        return [Problem(REQUEST, str(e))]
    refused = refuse_disabled(list(request.device_types()), disabled)
    if refused:
        problems.append(Problem(DEVICE_TYPE, refused))
    if known is None:
        return problems
    missing = [t for t in request.device_types() if t not in known]
    if missing:
        have = ", ".join(sorted(known)) or "none"
        problems.append(
            Problem(
                DEVICE_TYPE,
                f"no node in the cluster has a device of type {', '.join(map(repr, missing))} "
                f"(types present: {have}): the pod could never be scheduled",
            )
        )
    return problems


def refusal(problems: list[Problem]) -> str:
    """One message for the user (kubectl prints it after 'admission webhook ... denied')."""
    if len(problems) == 1:
        return f"devshare: {problems[0].message}"
    return f"devshare: {len(problems)} problems: " + "; ".join(
        f"({i}) {p.message}" for i, p in enumerate(problems, 1)
    )
