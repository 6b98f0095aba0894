"""Dynamic Resource Allocation (``resource.k8s.io/v1``): devshare's driver, its DeviceClasses, the
ResourceSlices it publishes from a node's inventory, and the ResourceClaims it reads and allocates.

devshare's driver is ``gpu.devshare.io`` (:data:`DRIVER`): one pool per node, named after the node,
in one ResourceSlice. Every device of the node's Device object is a device of the slice, named
``<type>-<minor>`` (``gpu-0``, ``rdma-1``), with ``allowMultipleAllocations: true`` and consumable
capacities that follow devshare's rules (:func:`~devshare.model.draslices.slice_object`):

- a GPU: ``compute`` in whole percent of the card (0-100, step 1; default 100: a request that asks
  no compute takes the card whole, as ``nvidia.com/gpu: 1`` does) and ``memory`` in bytes (step 1Mi;
  default 0: memory is asked in bytes or not at all, as ``koordinator.sh/gpu-core`` alone asks none);
- an RDMA or FPGA device: ``share`` in whole percent (default 100).

Attributes (in the driver's domain, so a CEL selector reads ``device.attributes["gpu.devshare.io"].model``):
``type``, ``uuid``, ``minor``, ``model``, ``numaNode`` and ``driverVersion`` (a semantic version) where known.

The slices and DeviceClasses themselves are :mod:`devshare.model.draslices`. This module and that
one only parse and build objects (plain dicts in the API's JSON shape); the translation
of claims into the engine's requests and their placement is :mod:`devshare.engine.dra`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import msgspec

from devshare.model import names
from devshare.model.errors import InvalidInput
from devshare.model.quantity import MIB, format_bytes, parse_quantity, shown
from devshare.model.request import WHOLE

API_VERSION = "resource.k8s.io/v1"
DRIVER = "gpu.devshare.io"
# the DeviceClasses devshare ships (deploy/dra): a share of a GPU (or a whole one, when no compute is
# asked), a whole GPU, a share of an RDMA or FPGA device; each is marked by DEVICE_TYPE_LABEL
CLASS_GPU = "gpu.devshare.io"
CLASS_WHOLE_GPU = "whole-gpu.devshare.io"
CLASS_RDMA = "rdma.devshare.io"
CLASS_FPGA = "fpga.devshare.io"
DEVICE_TYPE_LABEL = "devshare.io/device-type"  # on a DeviceClass devshare allocates: gpu | rdma | fpga
WHOLE_LABEL = "devshare.io/whole-device"  # "true" on a DeviceClass whose devices are taken whole
# the scheduling gate the webhook puts on a pod whose claims devshare allocates, lifted once they are
GATE = "devshare.io/dra-allocation"
PUBLISHED_BY = "devshare.io/published-by"  # ResourceSlice label: agent | controller
COMPUTE = "compute"  # GPU capacity: percent of the card
MEMORY = "memory"  # GPU capacity: bytes
SHARE = "share"  # RDMA / FPGA capacity: percent of the device
MAX_SLICE_DEVICES = 128  # resource.k8s.io/v1 ResourceSliceMaxDevices
CLAIM_RECORD = "resourceclaim:"  # a claim's record in the engine's state: ``<namespace>/resourceclaim:<name>``
NODE_FIELD = "metadata.name"

_DEVICE_NAME = re.compile(r"^(?P<type>[a-z0-9]+)-(?P<minor>\d+)$")


def shipped_classes() -> dict[str, tuple[str, bool]]:
    """The DeviceClasses devshare ships: name -> (device type, taken whole)."""
    return {CLASS_GPU: (names.GPU, False), CLASS_WHOLE_GPU: (names.GPU, True),
            CLASS_RDMA: (names.RDMA, False), CLASS_FPGA: (names.FPGA, False)}


def claim_record_key(namespace: str, name: str) -> str:
    """The key of a claim's allocation in the engine's state (never a pod's: ``:`` is not in pod names)."""
    return f"{namespace}/{CLAIM_RECORD}{name}"


def is_claim_record(key: str) -> bool:
    return f"/{CLAIM_RECORD}" in key


def device_name(device_type: str, minor: int) -> str:
    return f"{device_type}-{minor}"


def parse_device_name(name: str) -> tuple[str, int] | None:
    m = _DEVICE_NAME.match(name)
    return (m.group("type"), int(m.group("minor"))) if m else None


def cel_selectors(raw: Any, field: str) -> list[str]:
    """The CEL expressions of a DeviceClass's or a request's ``selectors``."""
    out: list[str] = []
    for i, s in enumerate(raw or []):
        expr = (s.get("cel") or {}).get("expression") if isinstance(s, dict) else None
        if not isinstance(expr, str) or not expr.strip():
            raise InvalidInput("each selector needs cel.expression", field=f"{field}[{i}]")
        out.append(expr)
    return out


# ---------------------------------------------------------------------------------------- claims
class Request(msgspec.Struct, frozen=True, kw_only=True):
    """One request of a claim (an ``exactly`` request, or one alternative of ``firstAvailable``)."""

    name: str  # the result's request name: ``req`` or ``req/sub``
    device_class: str
    selectors: tuple[str, ...] = ()
    all_devices: bool = False  # allocationMode: All
    count: int = 1
    capacity: dict[str, Fraction] = msgspec.field(default_factory=dict)  # capacity.requests, by name
    admin_access: bool = False


class Constraint(msgspec.Struct, frozen=True, kw_only=True):
    requests: tuple[str, ...] = ()  # empty: every request
    match_attribute: str = ""
    distinct_attribute: str = ""


class Result(msgspec.Struct, frozen=True, kw_only=True):
    """One allocated device of a claim."""

    request: str
    driver: str
    pool: str
    device: str
    share_id: str = ""
    consumed: dict[str, Fraction] = msgspec.field(default_factory=dict)


class Allocation(msgspec.Struct, frozen=True, kw_only=True):
    results: tuple[Result, ...]
    node: str = ""  # the node its nodeSelector names ("" when it is not one node)


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    # per request of the spec: its alternatives (one for ``exactly``, several for ``firstAvailable``)
    requests: tuple[tuple[Request, ...], ...] = ()
    constraints: tuple[Constraint, ...] = ()
    allocation: Allocation | None = None
    reserved_for: tuple[str, ...] = ()  # uids of the consumers (pods) kube-scheduler reserved it for
    deleting: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def classes(self) -> set[str]:
        return {alt.device_class for alts in self.requests for alt in alts}


def _request(raw: dict[str, Any], name: str, field: str) -> Request:
    dclass = raw.get("deviceClassName")
    if not isinstance(dclass, str) or not dclass:
        raise InvalidInput("deviceClassName is required", field=field)
    mode = raw.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise InvalidInput(f"allocationMode must be ExactCount or All, got {shown(mode)}", field=field)
    count = raw.get("count", 1) if mode == "ExactCount" else 0
    if isinstance(count, bool) or not isinstance(count, int) or (mode == "ExactCount" and count < 1):
        raise InvalidInput(f"count must be an integer >= 1, got {shown(count)}", field=field)
    caps: dict[str, Fraction] = {}
    for key, value in ((raw.get("capacity") or {}).get("requests") or {}).items():
        caps[str(key)] = parse_quantity(value, field=f"{field}.capacity.requests.{key}")
    selectors = tuple(cel_selectors(raw.get("selectors"), f"{field}.selectors"))
    return Request(name=name, device_class=dclass, selectors=selectors,
                   all_devices=mode == "All", count=count, capacity=caps, admin_access=bool(raw.get("adminAccess")))


def parse_claim(obj: Any) -> Claim:
    """A ResourceClaim (``resource.k8s.io/v1``). Raises :class:`InvalidInput` naming the bad field."""
    if not isinstance(obj, dict):
        raise InvalidInput("a ResourceClaim must be a mapping", field="ResourceClaim")
    meta = obj.get("metadata") or {}
    ns, name = meta.get("namespace") or "default", meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput("metadata.name is missing", field="ResourceClaim")
    where = f"ResourceClaim {ns}/{name}"
    devices = ((obj.get("spec") or {}).get("devices") or {})
    return Claim(namespace=ns, name=name, uid=str(meta.get("uid") or ""),
                 resource_version=str(meta.get("resourceVersion") or ""),
                 requests=parse_requests(devices, where), constraints=_constraints(devices, where),
                 allocation=parse_allocation((obj.get("status") or {}).get("allocation"), where),
                 reserved_for=tuple(str(r.get("uid") or "") for r in (obj.get("status") or {}).get("reservedFor") or []
                                    if isinstance(r, dict)),
                 deleting=bool(meta.get("deletionTimestamp")))


def parse_requests(devices: dict[str, Any], where: str) -> tuple[tuple[Request, ...], ...]:
    """The requests of a claim's (or template's) ``spec.devices``."""
    out: list[tuple[Request, ...]] = []
    for i, r in enumerate(devices.get("requests") or []):
        field = f"{where}: spec.devices.requests[{i}]"
        if not isinstance(r, dict) or not isinstance(r.get("name"), str):
            raise InvalidInput("each request needs a name", field=field)
        if isinstance(r.get("exactly"), dict):
            out.append((_request(r["exactly"], r["name"], f"{field}.exactly"),))
        elif isinstance(r.get("firstAvailable"), list) and r["firstAvailable"]:
            alts = []
            for j, sub in enumerate(r["firstAvailable"]):
                if not isinstance(sub, dict) or not isinstance(sub.get("name"), str):
                    raise InvalidInput("each subrequest needs a name", field=f"{field}.firstAvailable[{j}]")
                alts.append(_request(sub, f"{r['name']}/{sub['name']}", f"{field}.firstAvailable[{j}]"))
            out.append(tuple(alts))
        else:
            raise InvalidInput("a request needs exactly or firstAvailable", field=field)
    return tuple(out)


def _constraints(devices: dict[str, Any], where: str) -> tuple[Constraint, ...]:
    out = []
    for i, c in enumerate(devices.get("constraints") or []):
        if not isinstance(c, dict):
            raise InvalidInput("a constraint must be a mapping", field=f"{where}: spec.devices.constraints[{i}]")
        out.append(Constraint(requests=tuple(str(r) for r in c.get("requests") or []),
                              match_attribute=str(c.get("matchAttribute") or ""),
                              distinct_attribute=str(c.get("distinctAttribute") or "")))
    return tuple(out)


def parse_allocation(raw: Any, where: str = "ResourceClaim") -> Allocation | None:
    if not isinstance(raw, dict):
        return None
    results = []
    for i, r in enumerate((raw.get("devices") or {}).get("results") or []):
        if not isinstance(r, dict):
            raise InvalidInput("a result must be a mapping", field=f"{where}: status.allocation.devices.results[{i}]")
        consumed = {str(k): parse_quantity(v, field=f"{where}: consumedCapacity.{k}")
                    for k, v in (r.get("consumedCapacity") or {}).items()}
        results.append(Result(request=str(r.get("request") or ""), driver=str(r.get("driver") or ""),
                              pool=str(r.get("pool") or ""), device=str(r.get("device") or ""),
                              share_id=str(r.get("shareID") or ""), consumed=consumed))
    return Allocation(results=tuple(results), node=selected_node(raw.get("nodeSelector")))


def selected_node(selector: Any) -> str:
    """The node a nodeSelector names (one term, ``metadata.name In [node]``), else ""."""
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
    if not isinstance(terms, list) or len(terms) != 1 or not isinstance(terms[0], dict):
        return ""
    for f in terms[0].get("matchFields") or []:
        values = f.get("values") if isinstance(f, dict) else None
        if f.get("key") == NODE_FIELD and f.get("operator") == "In" and isinstance(values, list) and len(values) == 1:
            return str(values[0])
    return ""


def node_selector(node: str) -> dict[str, Any]:
    return {"nodeSelectorTerms": [{"matchFields": [{"key": NODE_FIELD, "operator": "In", "values": [node]}]}]}


def allocation_status(results: list[Result], node: str, *, timestamp: str = "") -> dict[str, Any]:
    """``status.allocation`` for ``results`` on ``node``. ``timestamp`` (RFC 3339): its
    ``allocationTimestamp``; kube-scheduler (v1.37, DRADeviceBindingConditions) sets one in its PreBind
    when missing, which the API server refuses on an allocation already written (immutable): the
    allocator writes it with the allocation."""
    out = []
    for r in results:
        entry: dict[str, Any] = {"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}
        if r.share_id:
            entry["shareID"] = r.share_id
        if r.consumed:
            entry["consumedCapacity"] = {k: _quantity_text(k, v) for k, v in r.consumed.items()}
        out.append(entry)
    status: dict[str, Any] = {"devices": {"results": out}, "nodeSelector": node_selector(node)}
    if timestamp:
        status["allocationTimestamp"] = timestamp
    return status


def _quantity_text(name: str, v: Fraction) -> str:
    if name == MEMORY and v.denominator == 1:
        return format_bytes(int(v))
    return str(int(v)) if v.denominator == 1 else f"{float(v):g}"


# ---------------------------------------------------------------------------------------- pods
class PodClaimRef(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a pod's ``spec.resourceClaims``: the claim it names (directly, or generated from a
    template and reported in ``status.resourceClaimStatuses``; "" while not generated yet)."""

    name: str  # the pod's name for it
    claim: str = ""
    template: str = ""


def _mapping(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _items(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def pod_claims(pod: dict[str, Any]) -> list[PodClaimRef]:
    spec = _mapping(pod.get("spec"))
    generated = {str(s.get("name")): s.get("resourceClaimName") or ""
                 for s in _items(_mapping(pod.get("status")).get("resourceClaimStatuses")) if isinstance(s, dict)}
    out = []
    for rc in _items(spec.get("resourceClaims")):
        if not isinstance(rc, dict) or not isinstance(rc.get("name"), str):
            continue
        if rc.get("resourceClaimName"):
            out.append(PodClaimRef(name=rc["name"], claim=str(rc["resourceClaimName"])))
        elif rc.get("resourceClaimTemplateName"):
            out.append(PodClaimRef(name=rc["name"], claim=str(generated.get(rc["name"]) or ""),
                                   template=str(rc["resourceClaimTemplateName"])))
    return out


def has_gate(pod: dict[str, Any]) -> bool:
    return any(isinstance(g, dict) and g.get("name") == GATE
               for g in _items(_mapping(pod.get("spec")).get("schedulingGates")))


# ---------------------------------------------------------------------------------------- capacity units
def compute_milli(amount: Fraction) -> int:
    """A ``compute``/``share`` capacity (percent) in the engine's thousandths, rounded up to whole percent."""
    pct = -(-amount.numerator // amount.denominator)
    return int(pct) * 10


def memory_bytes(amount: Fraction) -> int:
    """A ``memory`` capacity in bytes, rounded up to the slice's step (1Mi)."""
    b = -(-amount.numerator // amount.denominator)
    return int(-(-b // MIB) * MIB)


def whole_compute() -> Fraction:
    return Fraction(WHOLE // 10)


# ---------------------------------------------------------------------------------------- node choice
class NodeTerm(msgspec.Struct, frozen=True):
    """One required node-affinity term: every expression ``(key, operator, values)`` must hold."""

    expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def allows(self, name: str, labels: Mapping[str, str]) -> bool:
        for key, op, values in self.expressions:
            have = name if key == NODE_FIELD else labels.get(key)
            if op == "In" and have not in values:
                return False
            if op == "NotIn" and have in values:
                return False
            if op == "Exists" and have is None:
                return False
            if op == "DoesNotExist" and have is not None:
                return False
            if op in ("Gt", "Lt"):
                try:
                    a, b = int(have or ""), int(values[0])
                except (ValueError, IndexError):
                    return False
                if (op == "Gt" and not a > b) or (op == "Lt" and not a < b):
                    return False
        return True


class NodeFilter(msgspec.Struct, frozen=True):
    """The nodes a pod may run on by its ``nodeSelector`` and required node affinity (what an
    allocation's node must satisfy, or kube-scheduler could never place the pod there)."""

    selector: tuple[tuple[str, str], ...] = ()
    terms: tuple[NodeTerm, ...] = ()  # any one must hold (none: any node)

    def allows(self, name: str, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.selector):
            return False
        return not self.terms or any(t.allows(name, labels) for t in self.terms)


def node_filter(pod: dict[str, Any]) -> NodeFilter:
    spec = _mapping(pod.get("spec"))
    sel = spec.get("nodeSelector") or {}
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = []
    for t in required.get("nodeSelectorTerms") or []:
        if not isinstance(t, dict):
            continue
        exprs = [(str(e.get("key")), str(e.get("operator")), tuple(str(v) for v in e.get("values") or []))
                 for e in (t.get("matchExpressions") or []) + (t.get("matchFields") or []) if isinstance(e, dict)]
        terms.append(NodeTerm(tuple(exprs)))
    return NodeFilter(tuple(sorted((str(k), str(v)) for k, v in sel.items())) if isinstance(sel, dict) else (),
                      tuple(terms))


