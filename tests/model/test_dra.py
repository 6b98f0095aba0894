"""DRA objects: claims, their allocations, and the pods that use them."""

from __future__ import annotations

import contextlib
import copy
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

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


def full_claim() -> dict[str, Any]:
    """A claim with every part of the resource.k8s.io/v1 schema parse_claim reads (and config, tolerations)."""
    exact = {"deviceClassName": dra.CLASS_GPU, "count": 2, "allocationMode": "ExactCount", "adminAccess": False,
             "capacity": {"requests": {"compute": "30", "memory": "6Gi"}},
             "selectors": [{"cel": {"expression": "true"}}],
             "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}]}
    return {"apiVersion": dra.API_VERSION, "kind": "ResourceClaim",
            "metadata": {"name": "c", "namespace": "ns", "uid": "u", "resourceVersion": "3"},
            "spec": {"devices": {
                "requests": [{"name": "a", "exactly": exact},
                             {"name": "b", "firstAvailable": [{"name": "x", "deviceClassName": dra.CLASS_GPU,
                                                               "selectors": [{"cel": {"expression": "true"}}],
                                                               "capacity": {"requests": {"compute": "10"}}}]}],
                "constraints": [{"requests": ["a", "b"], "matchAttribute": "gpu.devshare.io/numaNode"}],
                "config": [{"requests": ["a"], "opaque": {"driver": dra.DRIVER, "parameters": {}}}]}},
            "status": {"allocation": {"devices": {"results": [
                {"request": "a", "driver": dra.DRIVER, "pool": "n1", "device": "gpu-0", "shareID": "s",
                 "consumedCapacity": {"compute": "30"}}]}, "nodeSelector": dra.node_selector("n1")},
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "pu"}]}}


def paths(v: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [at] if at else []
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    for k, sub in items:
        out += paths(sub, (*at, k))
    return out


def replaced(obj: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    parent = out
    for k in path[:-1]:
        parent = parent[k]
    parent[path[-1]] = value
    return out


SCHEMA_WORDS = sorted({str(k) for p in paths(full_claim()) for k in p if isinstance(k, str)})
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(SCHEMA_WORDS) | st.text(max_size=4), inner, max_size=4),
    max_leaves=12)


def test_the_full_claim_parses() -> None:
    claim = dra.parse_claim(full_claim())
    assert [len(alts) for alts in claim.requests] == [1, 1] and claim.requests[1][0].name == "b/x"
    assert claim.allocation is not None and claim.reserved_for == ("pu",)


@given(st.sampled_from(paths(full_claim())), json_values)
def test_any_value_anywhere_in_a_claim_parses_or_is_invalid_input(path: tuple[Any, ...], value: Any) -> None:
    """Whatever a ResourceClaim holds at any of its fields, parse_claim returns a Claim or raises
    InvalidInput naming the claim: never AttributeError, TypeError or KeyError (the controller's task
    and `devshare schedule` would crash)."""
    try:
        dra.parse_claim(replaced(full_claim(), path, value))
    except InvalidInput as e:
        assert e.field and e.field.startswith("ResourceClaim"), e


@given(json_values)
def test_any_value_as_a_whole_claim_parses_or_is_invalid_input(value: Any) -> None:
    with contextlib.suppress(InvalidInput):
        dra.parse_claim(value)


@pytest.mark.parametrize(("path", "value", "field", "message"), [
    (("metadata",), "x", "ResourceClaim", "metadata must be a mapping with a name, got 'x'"),
    (("metadata", "namespace"), 3, "ResourceClaim c", "metadata.namespace must be a string, got 3"),
    (("metadata", "uid"), {"a": 1}, "ResourceClaim ns/c: metadata.uid", "must be a string"),
    (("spec",), "q", "ResourceClaim ns/c: spec", "must be a mapping (devices: requests, constraints, config), got 'q'"),
    (("spec", "devices"), [], "ResourceClaim ns/c: spec.devices",
     "must be a mapping (requests, constraints, config), got []"),
    (("spec", "devices", "requests"), {"name": "a"}, "ResourceClaim ns/c: spec.devices.requests",
     "must be a list (of requests, each with a name and exactly or firstAvailable)"),
    (("spec", "devices", "requests", 0), "a", "ResourceClaim ns/c: spec.devices.requests[0]",
     "must be a mapping (a name and exactly or firstAvailable), got 'a'"),
    (("spec", "devices", "requests", 0, "exactly"), [], "ResourceClaim ns/c: spec.devices.requests[0].exactly",
     "must be a mapping (deviceClassName"),
    (("spec", "devices", "requests", 1, "firstAvailable"), {"name": "x"},
     "ResourceClaim ns/c: spec.devices.requests[1].firstAvailable", "must be a list (of subrequests"),
    (("spec", "devices", "requests", 1, "firstAvailable", 0), 7,
     "ResourceClaim ns/c: spec.devices.requests[1].firstAvailable[0]", "must be a mapping (name, deviceClassName"),
    (("spec", "devices", "requests", 0, "exactly", "selectors"), "true",
     "ResourceClaim ns/c: spec.devices.requests[0].exactly.selectors", "must be a list (of selectors"),
    (("spec", "devices", "requests", 0, "exactly", "selectors", 0, "cel"), "true",
     "ResourceClaim ns/c: spec.devices.requests[0].exactly.selectors[0]", "each selector needs cel.expression"),
    (("spec", "devices", "requests", 0, "exactly", "capacity"), ["30"],
     "ResourceClaim ns/c: spec.devices.requests[0].exactly.capacity", "must be a mapping (requests: "),
    (("spec", "devices", "requests", 0, "exactly", "capacity", "requests"), "30",
     "ResourceClaim ns/c: spec.devices.requests[0].exactly.capacity.requests", "must be a mapping (a capacity name"),
    (("spec", "devices", "requests", 0, "exactly", "adminAccess"), "false",
     "ResourceClaim ns/c: spec.devices.requests[0].exactly", "adminAccess must be true or false, got 'false'"),
    (("spec", "devices", "requests", 0, "exactly", "tolerations"), {"key": "k"},
     "ResourceClaim ns/c: spec.devices.requests[0].exactly.tolerations", "must be a list (of device tolerations)"),
    (("spec", "devices", "constraints"), {"requests": ["a"]}, "ResourceClaim ns/c: spec.devices.constraints",
     "must be a list (of constraints"),
    (("spec", "devices", "constraints", 0, "requests"), "ab",
     "ResourceClaim ns/c: spec.devices.constraints[0].requests",
     "must be a list (of request names), got 'ab'"),
    (("spec", "devices", "constraints", 0, "matchAttribute"), 3,
     "ResourceClaim ns/c: spec.devices.constraints[0].matchAttribute", "must be a string, got 3"),
    (("spec", "devices", "config"), "x", "ResourceClaim ns/c: spec.devices.config",
     "must be a list (of configurations"),
    (("spec", "devices", "config", 0, "opaque"), [], "ResourceClaim ns/c: spec.devices.config[0].opaque",
     "must be a mapping (driver, parameters)"),
    (("status",), [], "ResourceClaim ns/c: status", "must be a mapping (allocation, reservedFor), got []"),
    (("status", "allocation"), "n1", "ResourceClaim ns/c: status.allocation", "must be a mapping (devices: "),
    (("status", "allocation", "devices", "results"), {}, "ResourceClaim ns/c: status.allocation.devices.results",
     "must be a list (of results"),
    (("status", "allocation", "devices", "results", 0, "consumedCapacity"), "30",
     "ResourceClaim ns/c: status.allocation.devices.results[0].consumedCapacity", "must be a mapping"),
    (("status", "allocation", "devices", "results", 0, "device"), 0,
     "ResourceClaim ns/c: status.allocation.devices.results[0].device", "must be a string, got 0"),
    (("status", "reservedFor"), "pu", "ResourceClaim ns/c: status.reservedFor", "must be a list (of consumers"),
    (("status", "reservedFor", 0, "uid"), 5, "ResourceClaim ns/c: status.reservedFor[0].uid", "must be a string"),
])
def test_a_malformed_part_is_named_with_what_it_should_be(path: tuple[Any, ...], value: Any, field: str,
                                                           message: str) -> None:
    with pytest.raises(InvalidInput) as e:
        dra.parse_claim(replaced(full_claim(), path, value))
    assert e.value.field == field and e.value.message.startswith(message), (e.value.field, e.value.message)


def test_a_request_with_both_exactly_and_first_available_is_refused() -> None:
    obj = full_claim()
    obj["spec"]["devices"]["requests"][0]["firstAvailable"] = [{"name": "x", "deviceClassName": dra.CLASS_GPU}]
    with pytest.raises(InvalidInput, match="exactly or firstAvailable, not both"):
        dra.parse_claim(obj)


def test_a_template_spec_is_named_by_its_own_path() -> None:
    with pytest.raises(InvalidInput) as e:
        dra.parse_devices({"devices": {"requests": "x"}}, "ResourceClaimTemplate ns/t", "spec.spec")
    assert e.value.field == "ResourceClaimTemplate ns/t: spec.spec.devices.requests"


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


def test_a_templates_claims_are_read_from_its_spec_spec() -> None:
    spec = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": dra.CLASS_GPU}}]}}
    requests, constraints = dra.template_devices({"spec": {"spec": spec}}, "ResourceClaimTemplate ns/t")
    assert [alt.device_class for alts in requests for alt in alts] == [dra.CLASS_GPU] and constraints == ()
    for bad in ("x", None, {}, {"spec": "y"}, {"spec": None}):
        with pytest.raises(InvalidInput) as e:
            dra.template_devices({"spec": bad}, "ResourceClaimTemplate ns/t")
        assert str(e.value) == ("ResourceClaimTemplate ns/t: spec.spec must be a mapping, the spec of the "
                                "ResourceClaims made from it (spec.spec.devices.requests)")
    with pytest.raises(InvalidInput, match=r"ResourceClaimTemplate ns/t: spec\.spec\.devices: must be a mapping"):
        dra.template_devices({"spec": {"spec": {"devices": []}}}, "ResourceClaimTemplate ns/t")
