"""The ResourceSlices devshare publishes from a node's inventory (one pool per node, one slice) and the
DeviceClasses it ships, and the slices and classes of any driver read back for allocation.

The devices' names, capacities and attributes are described in :mod:`devshare.model.dra`."""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

import msgspec

from devshare.model import names
from devshare.model.device import NodeDevices
from devshare.model.dra import (
    API_VERSION,
    COMPUTE,
    DEVICE_TYPE_LABEL,
    DRIVER,
    MAX_SLICE_DEVICES,
    MEMORY,
    PUBLISHED_BY,
    SHARE,
    WHOLE_LABEL,
    cel_selectors,
    device_name,
)
from devshare.model.errors import InvalidInput
from devshare.model.quantity import format_bytes, parse_quantity, shown

_SEMVER = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?(.*)$")


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
    selectors = tuple(cel_selectors(spec.get("selectors"), f"DeviceClass {meta['name']}: spec.selectors"))
    dtype = labels.get(DEVICE_TYPE_LABEL, "") if isinstance(labels, dict) else ""
    whole = isinstance(labels, dict) and labels.get(WHOLE_LABEL) == "true"
    return DeviceClassInfo(name=meta["name"], selectors=selectors, device_type=dtype if isinstance(dtype, str) else "",
                           whole=whole)


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
