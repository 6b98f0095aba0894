"""Koordinator's ``scheduling.koordinator.sh/device-allocated`` annotation (seed 001's DeviceAllocations,
per pod), written and read::

    {"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-core": "50",
     "koordinator.sh/gpu-memory": "8Gi", "koordinator.sh/gpu-memory-ratio": "50"}}],
     "rdma": [{"minor": 0, "resources": {"koordinator.sh/rdma": "100"}}]}

Koordinator allocates per pod, not per container: the grants of all containers on one device are
added up, one entry per (type, minor), in minor order. Decoding also reads the seed's own
spellings (``kubernetes.io/``, ``gpu-mem``, ``gpu-mem-ratio``, the ``resouurces`` typo); pods
Koordinator itself placed are read leniently (:func:`read_placed`)."""

from __future__ import annotations

import json
from typing import Any

from devshare.model import names
from devshare.model.allocation import DeviceGrant, PodAllocation
from devshare.model.codecs.units import json_object, percent_text
from devshare.model.dialects.base import PlacedGrant, PlacedReading
from devshare.model.dialects.koordinator_names import (
    KOORD_DEVICE_ALLOCATED,
    KOORD_GPU_CORE,
    KOORD_GPU_MEMORY,
    KOORD_GPU_MEMORY_RATIO,
)
from devshare.model.errors import InvalidAnnotation, InvalidInput
from devshare.model.quantity import format_bytes, parse_quantity

FIELD = f"annotation {KOORD_DEVICE_ALLOCATED}"
_GPU_KEYS = {
    "gpu-core": "core",
    "gpu-memory": "memory",
    "gpu-mem": "memory",
    "gpu-memory-ratio": "ratio",
    "gpu-mem-ratio": "ratio",
}


def device_totals(alloc: PodAllocation) -> dict[str, list[DeviceGrant]]:
    """What the pod holds per (type, minor), with the device's id: what Koordinator records (per pod;
    init containers counted as kubelet does, :meth:`PodAllocation.usage`)."""
    out: dict[str, list[DeviceGrant]] = {}
    for u in sorted(alloc.usage(), key=lambda u: (u.type, u.minor)):
        out.setdefault(u.type, []).append(DeviceGrant(type=u.type, minor=u.minor, id=u.id, core_milli=u.core_milli,
                                                      memory=u.memory, memory_ratio_milli=u.memory_ratio_milli))
    return out


def _resources(g: DeviceGrant) -> dict[str, str]:
    if g.type == names.GPU:
        return {
            KOORD_GPU_CORE: percent_text(g.core_milli),
            KOORD_GPU_MEMORY: format_bytes(g.memory),
            KOORD_GPU_MEMORY_RATIO: percent_text(g.memory_ratio_milli),
        }
    return {f"koordinator.sh/{g.type}": percent_text(g.core_milli)}


def _entry(g: DeviceGrant) -> dict[str, Any]:
    # the id beside the minor: current Koordinator's scheduler fills it in (plugin.go fillID) and its
    # node side reads it (device_plugin_adapter.go); the seed's era wrote the minor alone
    entry: dict[str, Any] = {"minor": g.minor}
    if g.id:
        entry["id"] = g.id
    entry["resources"] = _resources(g)
    return entry


def encode_koordinator(alloc: PodAllocation) -> dict[str, str]:
    doc = {dtype: [_entry(g) for g in grants] for dtype, grants in device_totals(alloc).items()}
    return {KOORD_DEVICE_ALLOCATED: json.dumps(doc, separators=(",", ":"))}


def _milli(value: Any, key: str) -> int:
    q = parse_quantity(value, field=key) * 10
    if q < 0:
        raise InvalidAnnotation(f"{key} must be >= 0, got {value!r}", field=FIELD)
    return round(q)


def _grant(dtype: str, entry: Any) -> DeviceGrant:
    if not isinstance(entry, dict):
        raise InvalidAnnotation(f"each {dtype} entry must be an object with minor and resources", field=FIELD)
    minor = entry.get("minor", 0)
    if isinstance(minor, bool) or not isinstance(minor, int) or minor < 0:
        raise InvalidAnnotation(f"{dtype} minor must be an integer >= 0, got {minor!r}", field=FIELD)
    resources = entry.get("resources", entry.get("resouurces"))
    if resources is None:
        resources = {}
    if not isinstance(resources, dict):
        raise InvalidAnnotation(f"{dtype} {minor}: resources must be an object", field=FIELD)
    core = memory = ratio = 0
    for key, value in resources.items():
        short = str(key).split("/", 1)[-1]
        if dtype == names.GPU and short in _GPU_KEYS:
            what = _GPU_KEYS[short]
            if what == "memory":
                q = parse_quantity(value, field=str(key))
                if q < 0 or q.denominator != 1:
                    raise InvalidAnnotation(f"{key} must be a whole number of bytes, got {value!r}", field=FIELD)
                memory = int(q)
            elif what == "core":
                core = _milli(value, str(key))
            else:
                ratio = _milli(value, str(key))
        elif short == dtype:
            core = _milli(value, str(key))
    dev_id = entry.get("id", "")
    if not isinstance(dev_id, str):
        raise InvalidAnnotation(f"{dtype} {minor}: id must be a string, got {dev_id!r}", field=FIELD)
    return DeviceGrant(type=dtype, minor=minor, id=dev_id, core_milli=core, memory=memory, memory_ratio_milli=ratio)


def decode_koordinator(annotations: dict[str, str]) -> dict[str, list[DeviceGrant]] | None:
    """Device type -> grants per device (with the ``id`` current releases write beside the minor); None when absent."""
    doc = json_object(annotations, KOORD_DEVICE_ALLOCATED, shape='{"gpu": [{"minor": 0, "resources": {...}}]}')
    if doc is None:
        return None
    out: dict[str, list[DeviceGrant]] = {}
    try:
        for dtype, entries in doc.items():
            if not isinstance(entries, list):
                raise InvalidAnnotation(f"{dtype} must be a list of device entries", field=FIELD)
            out[str(dtype)] = [_grant(str(dtype), e) for e in entries]
    except InvalidAnnotation:
        raise
    except InvalidInput as e:
        raise InvalidAnnotation(str(e), field=FIELD) from e
    return out


def _placed_amount(value: Any, key: str, *, milli: bool) -> tuple[int | None, str | None]:
    try:
        q = parse_quantity(value, field=key)
    except InvalidInput as e:
        return None, f"{key}: {e.message}"
    if q < 0:
        return None, f"{key} is {value!r}, below 0"
    return (round(q * 10) if milli else int(q)), None


def _placed_entry(dtype: str, i: int, entry: Any) -> tuple[PlacedGrant | None, list[str]]:
    where = f"{dtype}[{i}]"
    if not isinstance(entry, dict):
        return None, [f"{where} is not an object with minor and resources"]
    minor = entry.get("minor")
    if minor is not None and (isinstance(minor, bool) or not isinstance(minor, int) or minor < 0):
        return None, [f"{where}: minor {minor!r} is not an integer >= 0"]
    dev_id = entry.get("id")
    dev_id = dev_id if isinstance(dev_id, str) else ""
    if minor is None and not dev_id:
        return None, [f"{where} names no device (neither minor nor id)"]
    resources = entry.get("resources", entry.get("resouurces"))
    problems: list[str] = []
    core = memory = ratio = None
    for key, value in (resources.items() if isinstance(resources, dict) else ()):
        short = str(key).split("/", 1)[-1]
        what = _GPU_KEYS.get(short) if dtype == names.GPU else ("core" if short == dtype else None)
        if what is None:
            continue
        amount, msg = _placed_amount(value, str(key), milli=what != "memory")
        if msg:
            problems.append(f"{where}: {msg}")
            continue
        if what == "core":
            core = amount
        elif what == "memory":
            memory = amount
        else:
            ratio = amount
    if not isinstance(resources, dict) or (core is None and memory is None and ratio is None):
        problems.append(f"{where} gives no amounts (resources): the device is counted whole")
        return PlacedGrant(type=dtype, minor=minor, id=dev_id, whole=True), problems
    if problems:
        return PlacedGrant(type=dtype, minor=minor, id=dev_id, whole=True), problems
    if dtype == names.GPU and core is None:
        core = 0  # a memory-only ask claims no compute
    return PlacedGrant(type=dtype, minor=minor, id=dev_id, core_milli=core, memory=memory,
                       memory_ratio_milli=ratio if memory is None else None), []


def read_placed(annotations: dict[str, str], spec: Any) -> PlacedReading | None:
    """A pod Koordinator placed: ``device-allocated`` as the seed's era wrote it (minors only, the
    ``kubernetes.io/`` names, ``gpu-mem``, the ``resouurces`` typo) and as current releases write it
    (an ``id`` beside each minor). Per pod: Koordinator counts a pod's init containers as kubelet does."""
    text = annotations.get(KOORD_DEVICE_ALLOCATED)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, TypeError) as e:
        return PlacedReading(dialect="koordinator", unreadable=(names.GPU,),
                             problems=(f"{FIELD} is not JSON ({e}): every GPU of the node is counted as held",))
    if not isinstance(doc, dict):
        return PlacedReading(dialect="koordinator", unreadable=(names.GPU,),
                             problems=(f"{FIELD} is not an object such as {{\"gpu\": [...]}}: every GPU of the "
                                       "node is counted as held",))
    grants: list[PlacedGrant] = []
    problems: list[str] = []
    unreadable: list[str] = []
    for dtype, entries in doc.items():
        if not isinstance(entries, list):
            problems.append(f"{FIELD}: {dtype} is not a list of devices: every {dtype} of the node is counted as held")
            unreadable.append(str(dtype))
            continue
        for i, entry in enumerate(entries):
            grant, msgs = _placed_entry(str(dtype), i, entry)
            problems += [f"{FIELD}: {m}" for m in msgs]
            if grant is not None:
                grants.append(grant)
            elif str(dtype) not in unreadable:
                unreadable.append(str(dtype))
    return PlacedReading(dialect="koordinator", grants=tuple(grants), problems=tuple(problems),
                         unreadable=tuple(unreadable))
