"""Koordinator's resource names (seed 001), ``koordinator.sh/`` and the older ``kubernetes.io/``.

- ``gpu: P``: P percent of one GPU's compute and memory (``gpu: 50`` -> core 50% + memory ratio
  50%); above 100, P / 100 whole GPUs (P a multiple of 100).
- ``gpu-core`` with ``gpu-memory-ratio`` or ``gpu-memory``: compute percent with memory as a ratio
  or in bytes. Above 100, core and ratio mean whole GPUs and must ask for the same number;
  ``gpu-memory`` over several GPUs is split evenly (bytes per GPU).
- ``rdma: P`` / ``fpga: P``: P percent of one device; above 100, P / 100 whole devices.

Zero means "not asked" (Kubernetes' usual ``resource: 0``).
"""

from __future__ import annotations

from typing import Any

from devshare.model import names, validation
from devshare.model.dialects.problems import Problems, read_whole
from devshare.model.request import WHOLE, DeviceRequest

DIMENSIONS = ("gpu", "gpu-core", "gpu-memory", "gpu-memory-ratio", names.RDMA, names.FPGA)
NAMES = frozenset(p + d for p in names.KOORD_PREFIXES for d in DIMENSIONS)
GPU_NAMES = frozenset(p + d for p in names.KOORD_PREFIXES for d in DIMENSIONS[:4])


def _read(resources: dict[str, Any], where: str, problems: Problems) -> tuple[dict[str, tuple[str, int]], set[str]]:
    """dimension -> (the name as written, value) for every dimension asked with a value above 0;
    and the dimensions given with a value that was refused (their problems are recorded)."""
    out: dict[str, tuple[str, int]] = {}
    bad: set[str] = set()
    for dim in DIMENSIONS:
        spellings = [(p + dim, resources[p + dim]) for p in names.KOORD_PREFIXES if p + dim in resources]
        if not spellings:
            continue
        msg = validation.koord_spelling(dim, spellings)
        if msg:
            problems.add(where, msg)
            bad.add(dim)
            continue
        name = spellings[0][0]
        unit = "bytes" if dim == "gpu-memory" else "percent"
        value = read_whole(resources, name, where, problems, unit)
        if value is None:
            bad.add(dim)
            continue
        if dim == "gpu-memory":
            msg = f"{name} is {value}; it must be above 0 (bytes of GPU memory, e.g. 4Gi)" if value < 0 else None
        else:
            msg = validation.percent_value(name, value)
        if msg:
            problems.add(where, msg)
            bad.add(dim)
        elif value > 0:
            out[dim] = (name, value)
    return out, bad


def _gpu(asked: dict[str, tuple[str, int]], where: str, problems: Problems) -> DeviceRequest | None:
    if "gpu" in asked:
        name, p = asked["gpu"]
        others = [asked[d][0] for d in ("gpu-core", "gpu-memory", "gpu-memory-ratio") if d in asked]
        msg = validation.koord_gpu_alone(name, others)
        if msg:
            problems.add(where, msg)
            return None
        n = validation.devices_for(p)
        share = WHOLE if n > 1 else p * 10
        return DeviceRequest(type=names.GPU, count=n, core_milli=share, memory_ratio_milli=share)
    core = asked.get("gpu-core")
    memory = asked.get("gpu-memory")
    ratio = asked.get("gpu-memory-ratio")
    if core is None and memory is None and ratio is None:
        return None
    core_name = core[0] if core else None
    memory_name = memory[0] if memory else None
    ratio_name = ratio[0] if ratio else None
    bad = [
        validation.koord_memory_or_ratio(memory_name, ratio_name),
        validation.koord_core_and_memory(core_name, memory_name or ratio_name),
    ]
    if core is not None and ratio is not None:
        bad.append(validation.koord_same_count(core[0], core[1], ratio[0], ratio[1]))
    n = validation.devices_for(core[1]) if core is not None else 1
    if memory is not None:
        bad.append(validation.koord_memory_split(memory[0], memory[1], n))
    msgs = [m for m in bad if m]
    if msgs:
        problems.extend(where, msgs)
        return None
    assert core is not None  # koord_core_and_memory refused the other cases
    return DeviceRequest(
        type=names.GPU,
        count=n,
        core_milli=core[1] * 10 // n,
        memory=memory[1] // n if memory is not None else 0,
        memory_ratio_milli=ratio[1] * 10 // n if ratio is not None else 0,
    )


def parse(resources: dict[str, Any], where: str, problems: Problems) -> list[DeviceRequest]:
    """The device requests of one container's Koordinator names (problems go to ``problems``)."""
    asked, bad = _read(resources, where, problems)
    out: list[DeviceRequest] = []
    if not bad & set(DIMENSIONS[:4]):  # combinations are checked once every GPU value is readable
        gpu = _gpu(asked, where, problems)
        if gpu is not None:
            out.append(gpu)
    for dtype in (names.RDMA, names.FPGA):
        if dtype in asked:
            n = validation.devices_for(asked[dtype][1])
            out.append(DeviceRequest(type=dtype, count=n, core_milli=WHOLE if n > 1 else asked[dtype][1] * 10))
    return out
