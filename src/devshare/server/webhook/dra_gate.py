"""DRA: the scheduling gate on pods whose claims devshare allocates (issue 38, docs/dra.md).

A pod created with ``spec.resourceClaims`` naming a claim (or a ResourceClaimTemplate) that asks a
device of one of devshare's DeviceClasses gets the gate :data:`~devshare.model.dra.GATE`: it is not
scheduled until devshare's allocator has written its claims' allocation and lifted the gate. The
claims and templates are read from the cluster (:class:`ClaimSource`); one that cannot be read (not
created yet, the API server unreachable) gates the pod all the same: the allocator lifts the gate
of a pod none of whose claims is devshare's as soon as it sees them, whereas an ungated pod would
be allocated by kube-scheduler, which knows nothing of the devices devshare's extended-resource pods
hold. Mutation never refuses a pod.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any, Protocol

from devshare.model import dra
from devshare.model.errors import InvalidInput
from devshare.server.webhook import jsonpatch

log = logging.getLogger(__name__)


class ClaimSource(Protocol):
    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        ...

    async def get_claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        ...


def _classes(obj: dict[str, Any], where: str, *, template: bool) -> set[str]:
    """The DeviceClasses a ResourceClaim (``template``: a ResourceClaimTemplate, whose ``spec.spec`` is the
    claim's spec) asks. Raises InvalidInput naming the malformed field."""
    requests, _ = dra.template_devices(obj, where) if template else dra.parse_devices(obj.get("spec"), where)
    return {alt.device_class for alts in requests for alt in alts}


async def needs_gate(pod: dict[str, Any], source: ClaimSource | None, classes: Collection[str]) -> str | None:
    """Why ``pod`` must wait for devshare's allocator (None when it need not)."""
    refs = dra.pod_claims(pod)
    if not refs or dra.has_gate(pod):
        return None
    meta = pod.get("metadata")
    ns = str(meta.get("namespace") or "default") if isinstance(meta, dict) else "default"
    pod_name = str(meta.get("name") or "") if isinstance(meta, dict) else ""
    for ref in refs:
        name = ref.claim or ref.template
        if source is None:
            return f"its claim {name} could not be read (no cluster connection)"
        try:
            obj = (await source.get_claim(ns, name) if ref.claim
                   else await source.get_claim_template(ns, name))
        except Exception as e:  # the API server unreachable: gate, the allocator decides
            log.warning("pod %s/%s: cannot read %s %s (%s); gating it", ns, pod_name, "claim"
                        if ref.claim else "template", name, e)
            return f"its claim {name} could not be read"
        if obj is None:
            return f"its {'claim' if ref.claim else 'ResourceClaimTemplate'} {name} does not exist yet"
        try:
            used = _classes(obj, f"{ns}/{name}", template=not ref.claim)
        except InvalidInput:
            continue  # kube-scheduler reports what is wrong with it
        ours = sorted(used & set(classes))
        if ours:
            return f"its claim {name} asks DeviceClass {', '.join(ours)}"
    return None


def gate_ops(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch adding the gate."""
    spec = pod.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("schedulingGates"), list) and spec["schedulingGates"]:
        return [jsonpatch.add("/spec/schedulingGates/-", {"name": dra.GATE})]
    return [jsonpatch.add("/spec/schedulingGates", [{"name": dra.GATE}])]


class ApiClaims:
    """:class:`ClaimSource` over the DRA API verbs (:class:`devshare.kube.dra.DraApi`)."""

    def __init__(self, api: Any) -> None:
        self.api = api

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        got: dict[str, Any] | None = await self.api.get("resourceclaims", namespace, name)
        return got

    async def get_claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        got: dict[str, Any] | None = await self.api.get("resourceclaimtemplates", namespace, name)
        return got
