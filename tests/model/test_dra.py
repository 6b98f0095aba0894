"""DRA objects: claims, their allocations, and the pods that use them."""

from __future__ import annotations

from fractions import Fraction

import pytest

from devshare.model import dra
from devshare.model.errors import InvalidInput

GiB = 2**30


def test_claims_parse_requests_constraints_and_allocations() -> None:
    claim = dra.parse_claim({
        "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "3"},
        "spec": {"devices": {
            "requests": [
                {"name": "a", "exactly": {"deviceClassName": dra.CLASS_GPU, "count": 2,
                                          "capacity": {"requests": {"compute": "30", "memory": "6Gi"}},
                                          "selectors": [{"cel": {"expression": "true"}}]}},
                {"name": "b", "firstAvailable": [{"name": "x", "deviceClassName": dra.CLASS_WHOLE_GPU},
                                                 {"name": "y", "deviceClassName": dra.CLASS_GPU,
                                                  "allocationMode": "All"}]}],
            "constraints": [{"requests": ["a", "b"], "matchAttribute": "gpu.devshare.io/numaNode"}]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "a", "driver": dra.DRIVER, "pool": "n1", "device": "gpu-0", "shareID": "s",
             "consumedCapacity": {"compute": "30", "memory": "6Gi"}}]}, "nodeSelector": dra.node_selector("n1")},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "pu"}]}})
    (a,), (x, y) = claim.requests
    assert (a.count, a.capacity, a.selectors) == (2, {"compute": Fraction(30), "memory": 6 * GiB}, ("true",))
    assert (x.name, y.name, y.all_devices) == ("b/x", "b/y", True)
    assert claim.constraints[0].match_attribute == "gpu.devshare.io/numaNode"
    assert claim.allocation is not None and claim.allocation.node == "n1"
    assert claim.allocation.results[0].consumed == {"compute": 30, "memory": 6 * GiB}
    assert claim.reserved_for == ("pu",)
    assert claim.classes() == {dra.CLASS_GPU, dra.CLASS_WHOLE_GPU}


@pytest.mark.parametrize(("request_", "message"), [
    ({"name": "r"}, "exactly or firstAvailable"),
    ({"name": "r", "exactly": {}}, "deviceClassName is required"),
    ({"name": "r", "exactly": {"deviceClassName": "c", "count": 0}}, "count must be"),
    ({"name": "r", "exactly": {"deviceClassName": "c", "allocationMode": "Some"}}, "allocationMode"),
    ({"name": "r", "exactly": {"deviceClassName": "c", "capacity": {"requests": {"memory": "lots"}}}},
     "not a Kubernetes quantity"),
])
def test_bad_claims_say_what_is_wrong(request_: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        dra.parse_claim({"metadata": {"name": "c"}, "spec": {"devices": {"requests": [request_]}}})


def test_allocation_status_round_trips() -> None:
    results = [dra.Result(request="a", driver=dra.DRIVER, pool="n1", device="gpu-0", share_id="s",
                          consumed={"compute": Fraction(30), "memory": Fraction(6 * GiB)})]
    status = dra.allocation_status(results, "n1", timestamp="2026-01-01T00:00:00Z")
    assert status["devices"]["results"][0]["consumedCapacity"] == {"compute": "30", "memory": "6Gi"}
    assert status["allocationTimestamp"] == "2026-01-01T00:00:00Z"
    assert dra.parse_allocation(status) == dra.Allocation(results=tuple(results), node="n1")


def test_pods_claims_gate_and_node_filter() -> None:
    pod = {"metadata": {"name": "p"},
           "spec": {"resourceClaims": [{"name": "a", "resourceClaimName": "direct"},
                                       {"name": "b", "resourceClaimTemplateName": "t"}],
                    "schedulingGates": [{"name": dra.GATE}], "nodeSelector": {"zone": "z1"},
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "In",
                                                                     "values": ["a100"]}]}]}}}},
           "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "p-b-x1"}]}}
    assert dra.pod_claims(pod) == [dra.PodClaimRef(name="a", claim="direct"),
                                   dra.PodClaimRef(name="b", claim="p-b-x1", template="t")]
    assert dra.has_gate(pod)
    f = dra.node_filter(pod)
    assert f.allows("n", {"zone": "z1", "gpu": "a100"})
    assert not f.allows("n", {"zone": "z1", "gpu": "t4"}) and not f.allows("n", {"gpu": "a100"})
    assert dra.is_claim_record(dra.claim_record_key("ns", "c")) and not dra.is_claim_record("ns/pod")
