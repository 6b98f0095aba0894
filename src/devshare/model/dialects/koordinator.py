"""Koordinator (seed 001): ``koordinator.sh/`` resource names and the older ``kubernetes.io/`` ones,
and the ``scheduling.koordinator.sh/device-allocated`` annotation.

- ``gpu: P``: P percent of one GPU's compute and memory (``gpu: 50`` -> core 50% + memory ratio
  50%); above 100, P / 100 whole GPUs (P a multiple of 100).
- ``gpu-core`` with ``gpu-memory-ratio`` or ``gpu-memory``: compute percent with memory as a ratio
  or in bytes. Above 100, core and ratio mean whole GPUs and must ask for the same number;
  ``gpu-memory`` over several GPUs is split evenly (bytes per GPU).
- ``rdma: P`` / ``fpga: P``: P percent of one device; above 100, P / 100 whole devices.

Zero means "not asked" (Kubernetes' usual ``resource: 0``). ``nvidia.com/gpu`` beside Koordinator's
``rdma``/``fpga`` (in one container or one pod) is carried in this dialect's annotation
(:meth:`KoordinatorDialect.carries`).

Its names are :mod:`.koordinator_names`, the rules a container's asks obey :mod:`.koordinator_rules`,
the ``device-allocated`` annotation (written, and read back from pods Koordinator placed)
:mod:`.koordinator_annotation`; this module reads a container's asks, renames them for the webhook
and is the dialect the registry holds.

The mutating webhook renames the ``kubernetes.io/`` spellings to ``koordinator.sh/`` ones
(kube-scheduler cannot route ``kubernetes.io/`` names to an extender: DESIGN.md, "Facts checked
against a real kube-scheduler") and ``gpu: N`` to ``gpu-core: N`` + ``gpu-memory-ratio: N`` (seed 001:
"the scheduler will convert it"), the names nodes advertise. A map that gives a name in both
spellings, or ``gpu`` next to another GPU dimension, is left as written, for validation to judge.
"""

from __future__ import annotations

from typing import Any

from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.dialects.base import Dialect, PlacedReading, read_whole
from devshare.model.dialects.koordinator_annotation import encode_koordinator, read_placed
from devshare.model.dialects.koordinator_names import (
    DIMENSIONS,
    GPU_NAMES,
    KOORD_DEVICE_ALLOCATED,
    KOORD_FPGA,
    KOORD_GPU,
    KOORD_GPU_CORE,
    KOORD_GPU_MEMORY,
    KOORD_GPU_MEMORY_RATIO,
    KOORD_GPU_SHARED,
    KOORD_PREFIXES,
    KOORD_RDMA,
    LEGACY_FPGA,
    LEGACY_GPU,
    LEGACY_GPU_CORE,
    LEGACY_GPU_MEMORY,
    LEGACY_GPU_MEMORY_RATIO,
    LEGACY_RDMA,
    MANAGED,
    NAMES,
)
from devshare.model.dialects.koordinator_rules import (
    core_and_memory,
    devices_for,
    gpu_alone,
    memory_or_ratio,
    memory_split,
    percent_value,
    same_count,
    shared_needs,
    shared_value,
    spelling,
)
from devshare.model.problems import Problems
from devshare.model.request import WHOLE, DeviceRequest, PodRequest

# ----------------------------------------------------------------------------------------------
# reader


def _read(resources: dict[str, Any], where: str, problems: Problems) -> tuple[dict[str, tuple[str, int]], set[str]]:
    """dimension -> (the name as written, value) for every dimension asked with a value above 0;
    and the dimensions given with a value that was refused (their problems are recorded)."""
    out: dict[str, tuple[str, int]] = {}
    bad: set[str] = set()
    if KOORD_GPU_SHARED in resources:
        n = read_whole(resources, KOORD_GPU_SHARED, where, problems, "GPUs")
        msg = shared_value(KOORD_GPU_SHARED, n) if n is not None and n != 0 else None
        if n is None or msg:
            if msg:
                problems.add(where, msg)
            bad.add("gpu.shared")
        elif n > 0:
            out["gpu.shared"] = (KOORD_GPU_SHARED, n)
    for dim in DIMENSIONS:
        spellings = [(p + dim, resources[p + dim]) for p in KOORD_PREFIXES if p + dim in resources]
        if not spellings:
            continue
        msg = spelling(dim, spellings)
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
            msg = percent_value(name, value)
        if msg:
            problems.add(where, msg)
            bad.add(dim)
        elif value > 0:
            out[dim] = (name, value)
    return out, bad


def _whole(n: int) -> DeviceRequest:
    return DeviceRequest(type=names.GPU, count=n, core_milli=WHOLE, memory_ratio_milli=WHOLE)


def _shared(asked: dict[str, tuple[str, int]], where: str, problems: Problems) -> DeviceRequest | None:
    """gpu.shared: N cards, the amounts given in all and split evenly (current Koordinator)."""
    name, n = asked["gpu.shared"]
    memory, ratio = asked.get("gpu-memory"), asked.get("gpu-memory-ratio")
    msgs: list[str | None] = [*shared_needs(name, asked)]
    msgs.append(memory_or_ratio(memory[0] if memory else None, ratio[0] if ratio else None))
    if memory is not None:
        msgs.append(memory_split(memory[0], memory[1], n))
    if any(msgs):
        problems.extend(where, [m for m in msgs if m])
        return None
    core = asked["gpu-core"][1] * 10 // n if "gpu-core" in asked else 0
    per_ratio = ratio[1] * 10 // n if ratio is not None else 0
    if core >= WHOLE and per_ratio >= WHOLE:
        return _whole(n)
    return DeviceRequest(type=names.GPU, count=n, core_milli=core,
                         memory=memory[1] // n if memory is not None else 0, memory_ratio_milli=per_ratio)


def _gpu(asked: dict[str, tuple[str, int]], where: str, problems: Problems) -> DeviceRequest | None:
    if "gpu.shared" in asked:
        return _shared(asked, where, problems)
    if "gpu" in asked:
        name, p = asked["gpu"]
        others = [asked[d][0] for d in ("gpu-core", "gpu-memory", "gpu-memory-ratio") if d in asked]
        msg = gpu_alone(name, others)
        if msg:
            problems.add(where, msg)
            return None
        n = devices_for(p)
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
        memory_or_ratio(memory_name, ratio_name),
        core_and_memory(core_name, memory_name or ratio_name),
    ]
    if core is not None and ratio is not None:
        bad.append(same_count(core[0], core[1], ratio[0], ratio[1]))
    n = devices_for(core[1]) if core is not None else devices_for(ratio[1]) if ratio is not None else 1
    msgs = [m for m in bad if m]
    if msgs:
        problems.extend(where, msgs)
        return None
    if n > 1:  # above 100 in whole multiples: whole cards, on any node (the memory comes with them)
        return _whole(n)
    if core is None:  # memory alone: no compute claimed (current Koordinator's memory-only and ratio-only asks)
        return DeviceRequest(type=names.GPU, count=1, memory=memory[1] if memory is not None else 0,
                             memory_ratio_milli=ratio[1] * 10 if ratio is not None else 0)
    return DeviceRequest(
        type=names.GPU,
        count=1,
        core_milli=core[1] * 10,
        memory=memory[1] if memory is not None else 0,
        memory_ratio_milli=ratio[1] * 10 if ratio is not None else 0,
    )


def read_container(resources: dict[str, Any], where: str, problems: Problems) -> list[DeviceRequest]:
    """The device requests of one container's Koordinator names (problems go to ``problems``)."""
    asked, bad = _read(resources, where, problems)
    out: list[DeviceRequest] = []
    if not bad & {*DIMENSIONS[:4], "gpu.shared"}:  # combinations are checked once every GPU value is readable
        gpu = _gpu(asked, where, problems)
        if gpu is not None:
            out.append(gpu)
    for dtype in (names.RDMA, names.FPGA):
        if dtype in asked:
            n = devices_for(asked[dtype][1])
            out.append(DeviceRequest(type=dtype, count=n, core_milli=WHOLE if n > 1 else asked[dtype][1] * 10))
    return out


# ----------------------------------------------------------------------------------------------
# webhook renames

_LEGACY_TO_KOORD = (
    (LEGACY_GPU, KOORD_GPU),
    (LEGACY_GPU_CORE, KOORD_GPU_CORE),
    (LEGACY_GPU_MEMORY, KOORD_GPU_MEMORY),
    (LEGACY_GPU_MEMORY_RATIO, KOORD_GPU_MEMORY_RATIO),
    (LEGACY_RDMA, KOORD_RDMA),
    (LEGACY_FPGA, KOORD_FPGA),
)
# any of these next to koordinator.sh/gpu makes the split ambiguous: leave it to validation
_GPU_DIMENSIONS = (
    KOORD_GPU_SHARED,
    KOORD_GPU_CORE,
    KOORD_GPU_MEMORY,
    KOORD_GPU_MEMORY_RATIO,
    LEGACY_GPU_CORE,
    LEGACY_GPU_MEMORY,
    LEGACY_GPU_MEMORY_RATIO,
)
def normalise(resources: dict[str, Any]) -> dict[str, Any]:
    """The resource map with the names normalised (a new dict; the input is not changed).

    A map that gives some name in both spellings is returned as it is (which one is meant is for
    validation to say), so that normalising is idempotent."""
    return _normalise_in_place(dict(resources))


def _normalise_in_place(out: dict[str, Any]) -> dict[str, Any]:
    if any(legacy in out and koord in out for legacy, koord in _LEGACY_TO_KOORD):
        return out
    for legacy, koord in _LEGACY_TO_KOORD:
        if legacy in out:
            out[koord] = out.pop(legacy)
    if KOORD_GPU in out and not any(k in out for k in _GPU_DIMENSIONS):
        value = out.pop(KOORD_GPU)
        out[KOORD_GPU_CORE] = value
        out[KOORD_GPU_MEMORY_RATIO] = value
    return out


# ----------------------------------------------------------------------------------------------
# the dialect


class KoordinatorDialect(Dialect):
    name = "koordinator"
    multi_card_share_needs_label = False  # seed 000's rule is mGPU's; above 100 Koordinator asks whole cards
    allocation_annotations = frozenset({KOORD_DEVICE_ALLOCATED})
    resource_names = NAMES
    managed_resources = MANAGED
    renamed_names = NAMES

    def carries(self, other: str, resources: dict[str, Any] | None) -> bool:
        # nvidia.com/gpu (seed 001 translates it into Koordinator resources) beside rdma/fpga: one
        # annotation holds both; beside a Koordinator GPU name in one container it is ambiguous
        if other != "nvidia":
            return False
        if resources is None or GPU_NAMES.isdisjoint(resources):
            return True
        return not any(resources[k] not in ("0", 0) for k in GPU_NAMES.intersection(resources))

    def read(self, resources: dict[str, Any], where: str, problems: Problems, context: Any,
             index: int) -> list[DeviceRequest]:
        return read_container(resources, where, problems)

    def encode(self, pod: PodRequest, alloc: PodAllocation, *, now_ns: int,
               device_memory: dict[int, int] | None) -> dict[str, str]:
        return encode_koordinator(alloc) if alloc.grants() else {}

    def renames(self, resources: dict[str, Any]) -> dict[str, Any]:
        return _normalise_in_place(resources)  # normalise_resources' own copy

    def read_placed(self, annotations: dict[str, str], spec: dict[str, Any]) -> PlacedReading | None:
        return read_placed(annotations, spec)
