"""DRA in a dry run (engine/dra/dryrun.py): the cluster file's objects read, the slices and classes it
lacks made as the agent and the chart would, its allocated claims counted (or reported), and a pod's
claims allocated on a state in memory, with a reason whenever one cannot be."""

from __future__ import annotations

from typing import Any

import pytest

from devshare.engine.dra.dryrun import DryRun
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model import dra, draslices
from devshare.model.errors import InvalidInput
from support.cluster import GiB, add_node

NS = "default"


def dry(*nodes: str, gpus: int = 1) -> DryRun:
    state = ClusterState()
    for n in nodes:
        add_node(state, n, gpus, memory=16 * GiB)
    return DryRun(Lifecycle(Scheduler(state)))


def devices(compute: str | None = None, cls: str = dra.CLASS_GPU) -> dict[str, Any]:
    ex: dict[str, Any] = {"deviceClassName": cls}
    if compute:
        ex["capacity"] = {"requests": {"compute": compute}}
    return {"devices": {"requests": [{"name": "gpu", "exactly": ex}]}}


def claim(name: str, spec: dict[str, Any], *, on: str | None = None, device: str = "gpu-0") -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": dra.API_VERSION, "kind": "ResourceClaim",
                           "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"}, "spec": spec}
    if on:
        obj["status"] = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": dra.DRIVER, "pool": on, "device": device}]},
            "nodeSelector": dra.node_selector(on)}}
    return obj


def template(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": dra.API_VERSION, "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NS}, "spec": {"spec": spec}}


def pod(name: str, *, claims: dict[str, str] | None = None, templates: dict[str, str] | None = None) -> dict[str, Any]:
    refs = [{"name": k, "resourceClaimName": v} for k, v in (claims or {}).items()]
    refs += [{"name": k, "resourceClaimTemplateName": v} for k, v in (templates or {}).items()]
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"}, "spec": {"resourceClaims": refs}}


def test_an_object_without_a_name_is_refused_naming_where() -> None:
    d = dry("n0")
    with pytest.raises(InvalidInput) as e:
        d.add({"kind": "ResourceSlice", "metadata": {}}, "cluster.yaml: document 3")
    assert e.value.message == "ResourceSlice has no metadata.name" and e.value.field == "cluster.yaml: document 3"
    with pytest.raises(InvalidInput, match=r"DeviceClass has no metadata\.name"):
        d.add({"kind": "DeviceClass", "metadata": "x"})


@pytest.mark.parametrize(("spec", "field", "message"), [
    ("q", "spec", "must be a mapping (devices: requests, constraints, config), got 'q'"),
    ({"devices": []}, "spec.devices", "must be a mapping (requests, constraints, config), got []"),
    ({"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": dra.CLASS_GPU, "capacity": "30"}}]}},
     "spec.devices.requests[0].exactly.capacity", "must be a mapping (requests: a capacity name -> quantity)"),
])
def test_a_malformed_claim_is_refused_naming_its_place_in_the_file_and_its_field(spec: object, field: str,
                                                                                message: str) -> None:
    d = dry("n0")
    with pytest.raises(InvalidInput) as e:
        d.add({**claim("c", {}), "spec": spec}, "cluster.yaml, document 2")
    assert e.value.field == f"cluster.yaml, document 2: ResourceClaim {NS}/c: {field}"
    assert e.value.message.startswith(message), e.value.message


def test_a_template_whose_claim_spec_is_malformed_is_refused_when_read_not_when_a_pod_uses_it() -> None:
    d = dry("n0")
    with pytest.raises(InvalidInput) as e:
        d.add(template("t", {"devices": {"requests": [{"name": "gpu", "exactly": "gpu"}]}}), "cluster.yaml, document 3")
    assert e.value.field == (f"cluster.yaml, document 3: ResourceClaimTemplate {NS}/t: "
                             "spec.spec.devices.requests[0].exactly")
    assert e.value.message.startswith("must be a mapping (deviceClassName")
    assert not d.templates


def test_start_makes_the_slices_and_classes_the_file_lacks() -> None:
    d = dry("n0", "n1")
    given = draslices.slice_object(d.state.devices["n0"])
    d.add(given)
    mine = draslices.device_class_object(dra.CLASS_GPU, "gpu")
    mine["spec"]["selectors"] = [{"cel": {"expression": 'device.attributes["gpu.devshare.io"].minor == 0'}}]
    d.add(mine)
    d.start()
    assert d.inventory.device("n0", "gpu", 0) is not None and d.inventory.device("n1", "gpu", 0) is not None
    assert len(d.inventory.slices) == 2  # n0's from the file, n1's made from its Device object
    assert set(dra.shipped_classes()) <= set(d.inventory.classes)
    assert d.inventory.classes[dra.CLASS_GPU].selectors  # the file's class kept, not replaced by the shipped one


def test_allocated_claims_are_counted_and_one_that_over_books_is_reported() -> None:
    d = dry("n0")
    d.add(claim("a", devices(), on="n0"))  # no consumed capacity: the whole card
    d.add(claim("b", devices(), on="n0"))
    d.start()
    t = d.state.table("gpu")
    assert t.used_core[d.state.row_of["n0"], 0] == 1000
    assert len(d.problems) == 1
    assert d.problems[0].startswith(f"claim {NS}/b: not counted, it would over-book a device: ")


def test_a_template_claim_is_made_as_the_resourceclaim_controller_makes_it() -> None:
    d = dry("n0")
    d.add(template("share", devices("30")))
    d.start()
    placed = d.place(pod("web", templates={"gpu": "share"}))
    assert placed.node == "n0" and placed.reason == ""
    (result,) = placed.claims["web-gpu"]["devices"]["results"]
    assert (result["device"], result["consumedCapacity"]["compute"]) == ("gpu-0", "30")
    made = d.claims[f"{NS}/web-gpu"]
    assert made["status"]["allocation"] == placed.claims["web-gpu"]
    assert d.state.table("gpu").used_core[d.state.row_of["n0"], 0] == 300
    # the next pod sees the first one's share
    d.add(template("big", devices("80")))
    refused = d.place(pod("db", templates={"gpu": "big"}))
    assert refused.node is None and refused.reason


def test_missing_objects_are_named() -> None:
    d = dry("n0")
    d.start()
    assert d.place(pod("a", templates={"gpu": "nope"})).reason == (
        f"ResourceClaimTemplate {NS}/nope is not in the cluster file")
    assert d.place(pod("a", claims={"gpu": "nope"})).reason == f"ResourceClaim {NS}/nope is not in the cluster file"


def test_claims_already_allocated_fix_the_node_or_conflict() -> None:
    d = dry("n0", "n1", gpus=2)
    d.add(claim("on0", devices(), on="n0"))
    d.add(claim("on1", devices(), on="n1"))
    d.add(claim("fresh", devices("20")))
    d.start()
    both = d.place(pod("p", claims={"x": "on0", "y": "on1"}))
    assert both.node is None and both.reason == "the pod's claims are allocated on different nodes (n0, n1)"
    fixed = d.place(pod("q", claims={"x": "on1", "y": "fresh"}))
    assert fixed.node == "n1" and list(fixed.claims) == ["fresh"]
    assert d.place(pod("r", claims={"x": "on0"})).node == "n0"  # nothing to allocate: the claim's node


def test_a_pod_without_devshare_s_claims_is_not_devshare_s_business() -> None:
    d = dry("n0")
    d.add(claim("other", devices(cls="gpu.nvidia.com")))
    d.start()
    placed = d.place(pod("p", claims={"x": "other"}))
    assert (placed.node, placed.reason, placed.claims) == ("", "", {})
    assert d.place(pod("bare")).node == ""


@pytest.mark.parametrize("spec", ["x", {"spec": "y"}, None, {}])
def test_a_template_whose_claim_spec_is_not_a_mapping_is_refused_when_read(spec: object) -> None:
    d = dry("n0")
    obj = {"kind": "ResourceClaimTemplate", "metadata": {"name": "t", "namespace": NS}, "spec": spec}
    with pytest.raises(InvalidInput) as e:
        d.add(obj, "cluster.yaml: document 2")
    assert e.value.message == (f"ResourceClaimTemplate {NS}/t: spec.spec must be a mapping, the spec of the "
                               "ResourceClaims made from it (spec.spec.devices.requests)")
    assert e.value.field == "cluster.yaml: document 2"
