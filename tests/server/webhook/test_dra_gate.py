"""DRA: the mutating webhook holds pods whose claims devshare allocates (issue 38)."""

from __future__ import annotations

from typing import Any

from devshare.model import dra
from devshare.server.webhook.dra_gate import gate_ops, needs_gate

CLASSES = tuple(dra.shipped_classes())


class Claims:
    def __init__(self, claims: dict[str, dict[str, Any]], templates: dict[str, dict[str, Any]] | None = None) -> None:
        self.claims, self.templates = claims, templates or {}

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claims.get(f"{namespace}/{name}")

    async def get_claim_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.templates.get(f"{namespace}/{name}")


def spec(cls: str) -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": cls}}]}}


def pod(**claim: str) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c"}], "resourceClaims": [{"name": "gpu", **claim}]}}


async def test_a_claim_of_a_devshare_class_gates_the_pod() -> None:
    src = Claims({"ns/c": {"spec": spec(dra.CLASS_GPU)}})
    why = await needs_gate(pod(resourceClaimName="c"), src, CLASSES)
    assert why is not None and dra.CLASS_GPU in why
    assert gate_ops(pod(resourceClaimName="c")) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": dra.GATE}]}]


async def test_a_template_of_a_devshare_class_gates_the_pod() -> None:
    src = Claims({}, {"ns/t": {"spec": {"spec": spec(dra.CLASS_WHOLE_GPU)}}})
    assert await needs_gate(pod(resourceClaimTemplateName="t"), src, CLASSES) is not None


async def test_other_classes_and_pods_without_claims_are_left_alone() -> None:
    src = Claims({"ns/c": {"spec": spec("gpu.nvidia.com")}})
    assert await needs_gate(pod(resourceClaimName="c"), src, CLASSES) is None
    assert await needs_gate({"metadata": {"name": "p"}, "spec": {"containers": []}}, src, CLASSES) is None


async def test_an_unreadable_claim_gates_the_pod_the_allocator_decides() -> None:
    assert await needs_gate(pod(resourceClaimName="missing"), Claims({}), CLASSES) is not None
    assert await needs_gate(pod(resourceClaimName="c"), None, CLASSES) is not None


async def test_a_pod_already_gated_by_devshare_is_not_gated_twice() -> None:
    p = pod(resourceClaimName="c")
    p["spec"]["schedulingGates"] = [{"name": "other"}, {"name": dra.GATE}]
    assert await needs_gate(p, Claims({"ns/c": {"spec": spec(dra.CLASS_GPU)}}), CLASSES) is None
    p["spec"]["schedulingGates"] = [{"name": "other"}]
    assert gate_ops(p) == [{"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": dra.GATE}}]


async def test_a_malformed_claim_or_template_leaves_the_pod_to_kube_scheduler() -> None:
    # the API server's schema keeps these out; read by hand they must never crash the webhook's review
    for bad in ("q", [], {"devices": []}, {"devices": {"requests": "gpu"}}):
        claims = Claims({"ns/c": {"spec": bad}}, {"ns/t": {"spec": {"spec": bad}}, "ns/u": {"spec": bad}})
        assert await needs_gate(pod(resourceClaimName="c"), claims, CLASSES) is None
        assert await needs_gate(pod(resourceClaimTemplateName="t"), claims, CLASSES) is None
        assert await needs_gate(pod(resourceClaimTemplateName="u"), claims, CLASSES) is None
