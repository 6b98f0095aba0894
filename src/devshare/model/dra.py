"""Dynamic Resource Allocation (``resource.k8s.io/v1``): devshare's driver, its DeviceClasses, the
ResourceSlices it publishes from a node's inventory, and the ResourceClaims it reads and allocates.

devshare's driver is ``gpu.devshare.io`` (:data:`DRIVER`): one pool per node, named after the node,
in one ResourceSlice. Every device of the node's Device object is a device of the slice, named
``<type>-<minor>`` (``gpu-0``, ``rdma-1``), with ``allowMultipleAllocations: true`` and consumable
capacities that follow devshare's rules (:func:`slice_object`):

- a GPU: ``compute`` in whole percent of the card (0-100, step 1; default 100: a request that asks
  no compute takes the card whole, as ``nvidia.com/gpu: 1`` does) and ``memory`` in bytes (step 1Mi;
  default 0: memory is asked in bytes or not at all, as ``koordinator.sh/gpu-core`` alone asks none);
- an RDMA or FPGA device: ``share`` in whole percent (default 100).

Attributes (in the driver's domain, so a CEL selector reads ``device.attributes["gpu.devshare.io"].model``):
``type``, ``uuid``, ``minor``, ``model``, ``numaNode`` and ``driverVersion`` (a semantic version) where known.

This module only parses and builds objects (plain dicts in the API's JSON shape); the translation
of claims into the engine's requests and their placement is :mod:`devshare.engine.dra`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import msgspec

from devshare.model import names
from devshare.model.device import NodeDevices
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
_SEMVER = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)$")


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


def semver_of(version: str) -> str | None:
    """A driver version as a semantic version (``535.104.05`` -> ``535.104.5``, ``550.54`` -> ``550.54.0``),
    or None when it is not one."""
    m = _SEMVER.match(version.strip())
    if not m:
        return None
    major, minor, patch, rest = m.groups()
    if rest and not re.fullmatch(r"(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?", rest):
        return None
    return f"{int(major)}.{int(minor or 0)}.{int(patch or 0)}{rest}"


class DeviceExtras(msgspec.Struct, frozen=True, kw_only=True):
    """What the node agent knows of a device beyond the Device object (NVML): NUMA node, driver version."""

    numa_node: int | None = None
    driver_version: str = ""


# ---------------------------------------------------------------------------------------- slices
def _percent_capacity(default: int = 100) -> dict[str, Any]:
    return {"value": "100", "requestPolicy": {"default": str(default),
                                              "validRange": {"min": "0", "max": "100", "step": "1"}}}


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def slice_devices(nd: NodeDevices,
                  extras: Mapping[tuple[str, int], DeviceExtras] | None = None) -> list[dict[str, Any]]:
    """The ResourceSlice devices of a node's inventory (healthy devices only: an unhealthy one is not offered)."""
    out: list[dict[str, Any]] = []
    for d in nd.devices:
        if not d.health:
            continue
        attrs: dict[str, Any] = {"type": {"string": d.type}, "uuid": {"string": d.id}, "minor": {"int": d.minor}}
        model = d.model or (nd.gpu_model if d.type == names.GPU else "")
        if model:
            attrs["model"] = {"string": model}
        extra = (extras or {}).get((d.type, d.minor))
        if extra is not None and extra.numa_node is not None:
            attrs["numaNode"] = {"int": extra.numa_node}
        version = semver_of(extra.driver_version) if extra is not None and extra.driver_version else None
        if version:
            attrs["driverVersion"] = {"version": version}
        if d.type == names.GPU:
            capacity: dict[str, Any] = {
                COMPUTE: {**_percent_capacity(), "value": _percent(d.core_milli)},
                MEMORY: {"value": format_bytes(d.memory),
                         "requestPolicy": {"default": "0", "validRange": {"min": "0", "step": "1Mi"}}},
            }
        else:
            capacity = {SHARE: {**_percent_capacity(), "value": _percent(d.core_milli)}}
        out.append({"name": device_name(d.type, d.minor), "attributes": attrs, "capacity": capacity,
                    "allowMultipleAllocations": True})
    return out[:MAX_SLICE_DEVICES]


def _percent(milli: int) -> str:
    return str(milli // 10) if milli % 10 == 0 else f"{milli / 10:g}"


def slice_object(nd: NodeDevices, *, extras: Mapping[tuple[str, int], DeviceExtras] | None = None,
                 generation: int = 1, published_by: str = "agent") -> dict[str, Any]:
    """The ResourceSlice of ``nd``'s node: one pool named after the node, in one slice."""
    return {
        "apiVersion": API_VERSION, "kind": "ResourceSlice",
        "metadata": {"name": slice_name(nd.node), "labels": {PUBLISHED_BY: published_by}},
        "spec": {"driver": DRIVER, "nodeName": nd.node,
                 "pool": {"name": nd.node, "generation": generation, "resourceSliceCount": 1},
                 "devices": slice_devices(nd, extras)},
    }


def device_class_object(name: str, device_type: str, *, whole: bool = False) -> dict[str, Any]:
    """A DeviceClass that selects devshare's devices of ``device_type`` (marked as devshare's by its label)."""
    labels = {DEVICE_TYPE_LABEL: device_type}
    if whole:
        labels[WHOLE_LABEL] = "true"
    expr = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "{device_type}"'
    return {"apiVersion": API_VERSION, "kind": "DeviceClass", "metadata": {"name": name, "labels": labels},
            "spec": {"selectors": [{"cel": {"expression": expr}}]}}


# ---------------------------------------------------------------------------------------- parsed slices
class Version(str):
    """An attribute of type ``version`` (a semantic version): CEL sees it as Kubernetes' semver type."""

    __slots__ = ()


AttrValue = bool | int | str  # a Version is a str


class SliceDevice(msgspec.Struct, frozen=True, kw_only=True):
    """One device of a ResourceSlice (any driver): what CEL selectors and allocation results refer to."""

    driver: str
    pool: str
    node: str  # spec.nodeName ("" for a slice not bound to one node)
    name: str
    attributes: dict[str, dict[str, AttrValue]]  # domain -> id -> value
    capacity: dict[str, dict[str, Fraction]]  # domain -> id -> amount
    multiple: bool = False  # allowMultipleAllocations

    def attribute(self, qualified: str) -> AttrValue | None:
        domain, _, ident = qualified.rpartition("/")
        return self.attributes.get(domain or self.driver, {}).get(ident)

    @property
    def device_type(self) -> str:
        t = self.attribute(f"{DRIVER}/type") if self.driver == DRIVER else None
        return t if isinstance(t, str) else ""

    @property
    def minor(self) -> int | None:
        m = self.attribute(f"{DRIVER}/minor") if self.driver == DRIVER else None
        return m if isinstance(m, int) and not isinstance(m, bool) else None

    @property
    def uuid(self) -> str:
        """The device's UUID as its driver publishes it (``uuid`` in any domain), for matching devices
        published by another driver to devshare's GPUs."""
        for attrs in self.attributes.values():
            for key in ("uuid", "UUID"):
                v = attrs.get(key)
                if isinstance(v, str) and v:
                    return v
        return ""


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, sep, ident = name.partition("/")
    return (domain, ident) if sep else (driver, name)


def parse_slice(obj: Any) -> list[SliceDevice]:
    """The devices of a ResourceSlice. Raises :class:`InvalidInput` naming the bad field."""
    if not isinstance(obj, dict):
        raise InvalidInput("a ResourceSlice must be a mapping", field="ResourceSlice")
    meta = obj.get("metadata") or {}
    where = f"ResourceSlice {meta.get('name', '?') if isinstance(meta, dict) else '?'}"
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise InvalidInput("spec is missing", field=where)
    driver = spec.get("driver")
    pool = (spec.get("pool") or {}).get("name") if isinstance(spec.get("pool"), dict) else None
    if not isinstance(driver, str) or not driver or not isinstance(pool, str) or not pool:
        raise InvalidInput("spec.driver and spec.pool.name are required", field=where)
    node = spec.get("nodeName") or ""
    out: list[SliceDevice] = []
    for i, d in enumerate(spec.get("devices") or []):
        at = f"{where}: spec.devices[{i}]"
        if not isinstance(d, dict) or not isinstance(d.get("name"), str):
            raise InvalidInput("each device needs a name", field=at)
        attrs: dict[str, dict[str, AttrValue]] = {}
        for key, value in (d.get("attributes") or {}).items():
            domain, ident = _qualified(str(key), driver)
            attrs.setdefault(domain, {})[ident] = _attribute(value, f"{at}.attributes.{key}")
        capacity: dict[str, dict[str, Fraction]] = {}
        for key, value in (d.get("capacity") or {}).items():
            domain, ident = _qualified(str(key), driver)
            raw = value.get("value") if isinstance(value, dict) else None
            if raw is None:
                raise InvalidInput("a capacity needs a value", field=f"{at}.capacity.{key}")
            capacity.setdefault(domain, {})[ident] = parse_quantity(raw, field=f"{at}.capacity.{key}")
        out.append(SliceDevice(driver=driver, pool=pool, node=str(node), name=d["name"], attributes=attrs,
                               capacity=capacity, multiple=bool(d.get("allowMultipleAllocations"))))
    return out


def _attribute(value: Any, field: str) -> AttrValue:
    if not isinstance(value, dict) or len(value) != 1:
        raise InvalidInput("an attribute has exactly one of int, bool, string, version", field=field)
    (kind, v), = value.items()
    if kind == "int" and isinstance(v, int) and not isinstance(v, bool):
        return v
    if kind == "bool" and isinstance(v, bool):
        return v
    if kind == "string" and isinstance(v, str):
        return v
    if kind == "version" and isinstance(v, str):
        return Version(v)
    raise InvalidInput(f"unsupported attribute {shown(value)}", field=field)


# ---------------------------------------------------------------------------------------- classes
class DeviceClassInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    selectors: tuple[str, ...] = ()  # CEL expressions
    device_type: str = ""  # devshare's device type when the class is devshare's ("" otherwise)
    whole: bool = False


def parse_device_class(obj: Any) -> DeviceClassInfo:
    if not isinstance(obj, dict) or not isinstance((obj.get("metadata") or {}).get("name"), str):
        raise InvalidInput("a DeviceClass needs metadata.name", field="DeviceClass")
    meta = obj["metadata"]
    labels = meta.get("labels") or {}
    spec = obj.get("spec") or {}
    selectors = tuple(_selectors(spec.get("selectors"), f"DeviceClass {meta['name']}: spec.selectors"))
    dtype = labels.get(DEVICE_TYPE_LABEL, "") if isinstance(labels, dict) else ""
    whole = isinstance(labels, dict) and labels.get(WHOLE_LABEL) == "true"
    return DeviceClassInfo(name=meta["name"], selectors=selectors, device_type=dtype if isinstance(dtype, str) else "",
                           whole=whole)


def _selectors(raw: Any, field: str) -> list[str]:
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
    selectors = tuple(_selectors(raw.get("selectors"), f"{field}.selectors"))
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


def slice_changed(current: dict[str, Any], desired: dict[str, Any]) -> bool:
    """Whether a published ResourceSlice differs from what should be published (devices, node, owner)."""
    cs, ds = current.get("spec") or {}, desired.get("spec") or {}
    labels = (current.get("metadata") or {}).get("labels") or {}
    return (cs.get("devices") != ds.get("devices") or cs.get("nodeName") != ds.get("nodeName")
            or cs.get("driver") != ds.get("driver")
            or labels.get(PUBLISHED_BY) != desired["metadata"]["labels"].get(PUBLISHED_BY))


def next_slice(current: dict[str, Any], desired: dict[str, Any]) -> dict[str, Any]:
    """``desired`` as a replacement of ``current``: its resourceVersion (the write's precondition) and
    the pool's generation one higher (kube-scheduler then ignores the older slice's devices)."""
    meta = dict(desired["metadata"])
    meta["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
    gen = ((current.get("spec") or {}).get("pool") or {}).get("generation") or 0
    spec = dict(desired["spec"])
    spec["pool"] = {**spec["pool"], "generation": int(gen) + 1}
    return {**desired, "metadata": meta, "spec": spec}
