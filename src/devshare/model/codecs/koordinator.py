"""``scheduling.koordinator.sh/device-allocated``: seed 001's DeviceAllocations, per pod.

``{"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-core": "50",
"koordinator.sh/gpu-memory": "8Gi", "koordinator.sh/gpu-memory-ratio": "50"}}],
"rdma": [{"minor": 0, "resources": {"koordinator.sh/rdma": "100"}}]}``

Koordinator allocates per pod, not per container: the grants of all containers on one device are
added up, one entry per (type, minor), in minor order. Decoding also reads the seed's own
spellings (``kubernetes.io/``, ``gpu-mem``, ``gpu-mem-ratio``, the ``resouurces`` typo).
Written for pods that asked in the Koordinator or NVIDIA dialect (seed 001 translates
``nvidia.com/gpu`` into Koordinator resources).
"""

from __future__ import annotations

import json
from typing import Any

from devshare.model import names
from devshare.model.allocation import DeviceGrant, PodAllocation
from devshare.model.codecs.units import json_object, percent_text
from devshare.model.errors import InvalidAnnotation, InvalidInput
from devshare.model.quantity import format_bytes, parse_quantity

FIELD = f"annotation {names.KOORD_DEVICE_ALLOCATED}"
_GPU_KEYS = {
    "gpu-core": "core",
    "gpu-memory": "memory",
    "gpu-mem": "memory",
    "gpu-memory-ratio": "ratio",
    "gpu-mem-ratio": "ratio",
}


def device_totals(alloc: PodAllocation) -> dict[str, list[DeviceGrant]]:
    """The pod's grants added up per (type, minor): what Koordinator records."""
    sums: dict[tuple[str, int], list[int]] = {}
    for _, g in alloc.grants():
        acc = sums.setdefault((g.type, g.minor), [0, 0, 0])
        acc[0] += g.core_milli
        acc[1] += g.memory
        acc[2] += g.memory_ratio_milli
    out: dict[str, list[DeviceGrant]] = {}
    for (dtype, minor), (core, memory, ratio) in sorted(sums.items()):
        out.setdefault(dtype, []).append(
            DeviceGrant(type=dtype, minor=minor, core_milli=core, memory=memory, memory_ratio_milli=ratio)
        )
    return out


def _resources(g: DeviceGrant) -> dict[str, str]:
    if g.type == names.GPU:
        return {
            names.KOORD_GPU_CORE: percent_text(g.core_milli),
            names.KOORD_GPU_MEMORY: format_bytes(g.memory),
            names.KOORD_GPU_MEMORY_RATIO: percent_text(g.memory_ratio_milli),
        }
    return {f"koordinator.sh/{g.type}": percent_text(g.core_milli)}


def encode_koordinator(alloc: PodAllocation) -> dict[str, str]:
    doc = {
        dtype: [{"minor": g.minor, "resources": _resources(g)} for g in grants]
        for dtype, grants in device_totals(alloc).items()
    }
    return {names.KOORD_DEVICE_ALLOCATED: json.dumps(doc, separators=(",", ":"))}


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
    return DeviceGrant(type=dtype, minor=minor, core_milli=core, memory=memory, memory_ratio_milli=ratio)


def decode_koordinator(annotations: dict[str, str]) -> dict[str, list[DeviceGrant]] | None:
    """Device type -> grants per device (no ids: Koordinator records minors only); None when absent."""
    doc = json_object(annotations, names.KOORD_DEVICE_ALLOCATED, shape='{"gpu": [{"minor": 0, "resources": {...}}]}')
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
