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


def _mapping_at(v: Any, field: str, what: str) -> dict[str, Any]:
    """``v`` when it is a mapping, {} when absent (None); else InvalidInput saying what it should hold."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise InvalidInput(f"must be a mapping ({what}), got {shown(v)}", field=field)
    return v


def _list_at(v: Any, field: str, what: str) -> list[Any]:
    """``v`` when it is a list, [] when absent (None); else InvalidInput saying what it should hold."""
    if v is None:
        return []
    if not isinstance(v, list):
        raise InvalidInput(f"must be a list ({what}), got {shown(v)}", field=field)
    return v


def _string_at(v: Any, field: str) -> str:
    """``v`` when it is a string, "" when absent (None); else InvalidInput."""
    if v is None:
        return ""
    if not isinstance(v, str):
        raise InvalidInput(f"must be a string, got {shown(v)}", field=field)
    return v


def _strings_at(v: Any, field: str, what: str) -> tuple[str, ...]:
    items = _list_at(v, field, what)
    return tuple(_string_at(s, f"{field}[{i}]") for i, s in enumerate(items))


def cel_selectors(raw: Any, field: str) -> list[str]:
    """The CEL expressions of a DeviceClass's or a request's ``selectors``."""
    out: list[str] = []
    for i, s in enumerate(_list_at(raw, field, "of selectors, each {cel: {expression: ...}}")):
        cel = s.get("cel") if isinstance(s, dict) else None
        expr = cel.get("expression") if isinstance(cel, dict) else None
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


_REQUEST_FIELDS = "deviceClassName, and optionally selectors, allocationMode, count, capacity, adminAccess, tolerations"


def _request(raw: Any, name: str, field: str) -> Request:
    raw = _mapping_at(raw, field, _REQUEST_FIELDS)
    dclass = raw.get("deviceClassName")
    if not isinstance(dclass, str) or not dclass:
        raise InvalidInput("deviceClassName is required", field=field)
    mode = raw.get("allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise InvalidInput(f"allocationMode must be ExactCount or All, got {shown(mode)}", field=field)
    count = raw.get("count", 1) if mode == "ExactCount" else 0
    if isinstance(count, bool) or not isinstance(count, int) or (mode == "ExactCount" and count < 1):
        raise InvalidInput(f"count must be an integer >= 1, got {shown(count)}", field=field)
    capacity = _mapping_at(raw.get("capacity"), f"{field}.capacity", "requests: a capacity name -> quantity")
    wanted = _mapping_at(capacity.get("requests"), f"{field}.capacity.requests",
                         "a capacity name -> quantity, e.g. compute: 30, memory: 6Gi")
    caps = {str(key): parse_quantity(value, field=f"{field}.capacity.requests.{key}") for key, value in wanted.items()}
    selectors = tuple(cel_selectors(raw.get("selectors"), f"{field}.selectors"))
    admin = raw.get("adminAccess")
    if admin is not None and not isinstance(admin, bool):
        raise InvalidInput(f"adminAccess must be true or false, got {shown(admin)}", field=field)
    for j, t in enumerate(_list_at(raw.get("tolerations"), f"{field}.tolerations", "of device tolerations")):
        _mapping_at(t, f"{field}.tolerations[{j}]", "key, operator, value, effect")
    return Request(name=name, device_class=dclass, selectors=selectors,
                   all_devices=mode == "All", count=count, capacity=caps, admin_access=bool(admin))


def parse_claim(obj: Any) -> Claim:
    """A ResourceClaim (``resource.k8s.io/v1``). Raises :class:`InvalidInput` naming the bad field."""
    if not isinstance(obj, dict):
        raise InvalidInput("a ResourceClaim must be a mapping", field="ResourceClaim")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise InvalidInput(f"metadata must be a mapping with a name, got {shown(meta)}", field="ResourceClaim")
    ns, name = meta.get("namespace") or "default", meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput("metadata.name is missing", field="ResourceClaim")
    if not isinstance(ns, str):
        raise InvalidInput(f"metadata.namespace must be a string, got {shown(ns)}", field=f"ResourceClaim {name}")
    where = f"ResourceClaim {ns}/{name}"
    requests, constraints = parse_devices(obj.get("spec"), where)
    status = _mapping_at(obj.get("status"), f"{where}: status", "allocation, reservedFor")
    reserved = _list_at(status.get("reservedFor"), f"{where}: status.reservedFor",
                        "of consumers, each {resource, name, uid}")
    return Claim(namespace=ns, name=name, uid=_string_at(meta.get("uid"), f"{where}: metadata.uid"),
                 resource_version=_string_at(meta.get("resourceVersion"), f"{where}: metadata.resourceVersion"),
                 requests=requests, constraints=constraints,
                 allocation=parse_allocation(status.get("allocation"), where),
                 reserved_for=tuple(_string_at(_mapping_at(r, f"{where}: status.reservedFor[{i}]",
                                                           "resource, name, uid").get("uid"),
                                               f"{where}: status.reservedFor[{i}].uid")
                                    for i, r in enumerate(reserved)),
                 deleting=bool(meta.get("deletionTimestamp")))


def parse_devices(spec: Any, where: str, path: str = "spec") -> tuple[tuple[tuple[Request, ...], ...],
                                                                      tuple[Constraint, ...]]:
    """The requests and constraints of a claim's ``spec`` (``path``: where that spec is in the object,
    ``spec.spec`` in a ResourceClaimTemplate). Raises :class:`InvalidInput` naming the bad field."""
    spec = _mapping_at(spec, f"{where}: {path}", "devices: requests, constraints, config")
    devices = _mapping_at(spec.get("devices"), f"{where}: {path}.devices", "requests, constraints, config")
    for i, c in enumerate(_list_at(devices.get("config"), f"{where}: {path}.devices.config",
                                   "of configurations, each {requests, opaque}")):
        field = f"{where}: {path}.devices.config[{i}]"
        c = _mapping_at(c, field, "requests, opaque: {driver, parameters}")
        _strings_at(c.get("requests"), f"{field}.requests", "of request names")
        _mapping_at(c.get("opaque"), f"{field}.opaque", "driver, parameters")
    return parse_requests(devices, where, f"{path}.devices"), _constraints(devices, where, f"{path}.devices")


def template_devices(obj: Any, where: str) -> tuple[tuple[tuple[Request, ...], ...], tuple[Constraint, ...]]:
    """The requests and constraints of the ResourceClaims a ResourceClaimTemplate ``obj`` makes: its
    ``spec.spec``, read as a claim's spec. Raises :class:`InvalidInput` (``where`` first) when it is not."""
    spec = obj.get("spec") if isinstance(obj, dict) else None
    if not isinstance(spec, dict) or not isinstance(spec.get("spec"), dict):
        raise InvalidInput(f"{where}: spec.spec must be a mapping, the spec of the ResourceClaims made from it "
                           "(spec.spec.devices.requests)")
    return parse_devices(spec["spec"], where, "spec.spec")


def parse_requests(devices: Any, where: str, path: str = "spec.devices") -> tuple[tuple[Request, ...], ...]:
    """The requests of a claim's (or template's) ``spec.devices``."""
    devices = _mapping_at(devices, f"{where}: {path}", "requests, constraints, config")
    out: list[tuple[Request, ...]] = []
    for i, r in enumerate(_list_at(devices.get("requests"), f"{where}: {path}.requests",
                                   "of requests, each with a name and exactly or firstAvailable")):
        field = f"{where}: {path}.requests[{i}]"
        r = _mapping_at(r, field, "a name and exactly or firstAvailable")
        if not isinstance(r.get("name"), str):
            raise InvalidInput("each request needs a name", field=field)
        exactly, first = r.get("exactly"), r.get("firstAvailable")
        if exactly is not None and first is not None:
            raise InvalidInput("a request has exactly or firstAvailable, not both", field=field)
        subs = _list_at(first, f"{field}.firstAvailable", "of subrequests, each with a name and deviceClassName")
        if exactly is not None:
            out.append((_request(exactly, r["name"], f"{field}.exactly"),))
        elif subs:
            alts = []
            for j, sub in enumerate(subs):
                sub_field = f"{field}.firstAvailable[{j}]"
                sub = _mapping_at(sub, sub_field, f"name, {_REQUEST_FIELDS}")
                if not isinstance(sub.get("name"), str):
                    raise InvalidInput("each subrequest needs a name", field=sub_field)
                alts.append(_request(sub, f"{r['name']}/{sub['name']}", sub_field))
            out.append(tuple(alts))
        else:
            raise InvalidInput("a request needs exactly or firstAvailable", field=field)
    return tuple(out)


def _constraints(devices: dict[str, Any], where: str, path: str) -> tuple[Constraint, ...]:
    out = []
    for i, c in enumerate(_list_at(devices.get("constraints"), f"{where}: {path}.constraints",
                                   "of constraints, each {requests, matchAttribute or distinctAttribute}")):
        field = f"{where}: {path}.constraints[{i}]"
        if not isinstance(c, dict):
            raise InvalidInput("a constraint must be a mapping", field=field)
        out.append(Constraint(requests=_strings_at(c.get("requests"), f"{field}.requests", "of request names"),
                              match_attribute=_string_at(c.get("matchAttribute"), f"{field}.matchAttribute"),
                              distinct_attribute=_string_at(c.get("distinctAttribute"), f"{field}.distinctAttribute")))
    return tuple(out)


def parse_allocation(raw: Any, where: str = "ResourceClaim") -> Allocation | None:
    """A claim's ``status.allocation`` (None when it has none)."""
    if raw is None:
        return None
    field = f"{where}: status.allocation"
    raw = _mapping_at(raw, field, "devices: {results}, nodeSelector")
    devices = _mapping_at(raw.get("devices"), f"{field}.devices", "results, config")
    results = []
    for i, r in enumerate(_list_at(devices.get("results"), f"{field}.devices.results",
                                   "of results, each {request, driver, pool, device}")):
        at = f"{field}.devices.results[{i}]"
        if not isinstance(r, dict):
            raise InvalidInput("a result must be a mapping", field=at)
        used = _mapping_at(r.get("consumedCapacity"), f"{at}.consumedCapacity", "a capacity name -> quantity")
        consumed = {str(k): parse_quantity(v, field=f"{at}.consumedCapacity.{k}") for k, v in used.items()}
        results.append(Result(request=_string_at(r.get("request"), f"{at}.request"),
                              driver=_string_at(r.get("driver"), f"{at}.driver"),
                              pool=_string_at(r.get("pool"), f"{at}.pool"),
                              device=_string_at(r.get("device"), f"{at}.device"),
                              share_id=_string_at(r.get("shareID"), f"{at}.shareID"), consumed=consumed))
    return Allocation(results=tuple(results), node=selected_node(raw.get("nodeSelector")))


def selected_node(selector: Any) -> str:
    """The node a nodeSelector names (one term, ``metadata.name In [node]``), else ""."""
    terms = selector.get("nodeSelectorTerms") if isinstance(selector, dict) else None
    if not isinstance(terms, list) or len(terms) != 1 or not isinstance(terms[0], dict):
        return ""
    for f in _items(terms[0].get("matchFields")):
        if not isinstance(f, dict):
            continue
        values = f.get("values")
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


