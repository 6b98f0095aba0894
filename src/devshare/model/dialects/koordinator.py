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

The annotation (seed 001's DeviceAllocations, per pod)::

    {"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-core": "50",
     "koordinator.sh/gpu-memory": "8Gi", "koordinator.sh/gpu-memory-ratio": "50"}}],
     "rdma": [{"minor": 0, "resources": {"koordinator.sh/rdma": "100"}}]}

Koordinator allocates per pod, not per container: the grants of all containers on one device are
added up, one entry per (type, minor), in minor order. Decoding also reads the seed's own
spellings (``kubernetes.io/``, ``gpu-mem``, ``gpu-mem-ratio``, the ``resouurces`` typo).

The mutating webhook renames the ``kubernetes.io/`` spellings to ``koordinator.sh/`` ones
(kube-scheduler cannot route ``kubernetes.io/`` names to an extender: DESIGN.md, "Facts checked
against a real kube-scheduler") and ``gpu: N`` to ``gpu-core: N`` + ``gpu-memory-ratio: N`` (seed 001:
"the scheduler will convert it"), the names nodes advertise. A map that gives a name in both
spellings, or ``gpu`` next to another GPU dimension, is left as written, for validation to judge.
"""

from __future__ import annotations

import json
from typing import Any

from devshare.model import names
from devshare.model.allocation import DeviceGrant, PodAllocation
from devshare.model.codecs.units import json_object, percent_text
from devshare.model.dialects.base import Dialect, PlacedGrant, PlacedReading, read_whole
from devshare.model.errors import InvalidAnnotation, InvalidInput
from devshare.model.problems import Problems
from devshare.model.quantity import format_bytes, parse_quantity
from devshare.model.request import MAX_DEVICES, WHOLE, WHOLE_PERCENT, DeviceRequest, PodRequest

# --- names: the current koordinator.sh/ ones and the seed's older kubernetes.io/ ones
KOORD_PREFIXES = ("koordinator.sh/", "kubernetes.io/")
KOORD_GPU = "koordinator.sh/gpu"
KOORD_GPU_CORE = "koordinator.sh/gpu-core"
KOORD_GPU_MEMORY = "koordinator.sh/gpu-memory"
KOORD_GPU_MEMORY_RATIO = "koordinator.sh/gpu-memory-ratio"
KOORD_RDMA = "koordinator.sh/rdma"
KOORD_FPGA = "koordinator.sh/fpga"
LEGACY_GPU = "kubernetes.io/gpu"
LEGACY_GPU_CORE = "kubernetes.io/gpu-core"
LEGACY_GPU_MEMORY = "kubernetes.io/gpu-memory"
LEGACY_GPU_MEMORY_RATIO = "kubernetes.io/gpu-memory-ratio"
LEGACY_RDMA = "kubernetes.io/rdma"
LEGACY_FPGA = "kubernetes.io/fpga"
KOORD_GPU_SHARED = "koordinator.sh/gpu.shared"  # current Koordinator: the number of cards shared
KOORD_DEVICE_ALLOCATED = "scheduling.koordinator.sh/device-allocated"  # the annotation

DIMENSIONS = ("gpu", "gpu-core", "gpu-memory", "gpu-memory-ratio", names.RDMA, names.FPGA)
NAMES = frozenset(p + d for p in KOORD_PREFIXES for d in DIMENSIONS) | {KOORD_GPU_SHARED}
GPU_NAMES = frozenset(p + d for p in KOORD_PREFIXES for d in DIMENSIONS[:4]) | {KOORD_GPU_SHARED}
MANAGED = (KOORD_GPU, KOORD_GPU_CORE, KOORD_GPU_MEMORY, KOORD_GPU_MEMORY_RATIO, KOORD_RDMA, KOORD_FPGA,
           KOORD_GPU_SHARED)

# ----------------------------------------------------------------------------------------------
# rules


def percent_value(name: str, value: int) -> str | None:
    """A percent dimension: above 0, and above 100 only as whole devices (a multiple of 100)."""
    if value < 0:
        return f"{name} is {value}; it must be above 0 (percent of one device, 100 = a whole device)"
    if value > MAX_DEVICES * WHOLE_PERCENT:
        return (f"{name} is {value}: that is more than {MAX_DEVICES} whole devices, more than any node has; give "
                "a percent of one device (at most 100), or 100 per whole device")
    if value > WHOLE_PERCENT and value % WHOLE_PERCENT:
        return (
            f"{name} is {value}; above 100 it asks for several whole devices and must be a multiple "
            f"of 100: write {value // WHOLE_PERCENT * WHOLE_PERCENT} or "
            f"{(value // WHOLE_PERCENT + 1) * WHOLE_PERCENT}, "
            "or at most 100 for a share of one device"
        )
    return None


def devices_for(percent: int) -> int:
    """How many devices a percent value asks for (1 up to 100, else percent / 100)."""
    return percent // WHOLE_PERCENT if percent > WHOLE_PERCENT else 1


def gpu_alone(gpu_name: str, others: list[str]) -> str | None:
    """``gpu`` already means core and memory ratio: it cannot be combined with the other GPU names."""
    if not others:
        return None
    return (
        f"{gpu_name} already asks for compute and memory ratio together, so it cannot be combined "
        f"with {', '.join(others)}: ask either {gpu_name} alone, or gpu-core with gpu-memory-ratio "
        "(or gpu-memory)"
    )


def memory_or_ratio(memory_name: str | None, ratio_name: str | None) -> str | None:
    """GPU memory is asked either in bytes or as a ratio, not both."""
    if memory_name and ratio_name:
        return (
            f"{memory_name} and {ratio_name} both ask for GPU memory: keep one of them "
            "(bytes with gpu-memory, or percent of the device's memory with gpu-memory-ratio)"
        )
    return None


def core_and_memory(core_name: str | None, memory_name: str | None) -> str | None:
    """gpu-core needs a memory dimension beside it (Koordinator refuses gpu-core alone); memory alone
    (gpu-memory or gpu-memory-ratio, no compute claimed) is one of current Koordinator's asks."""
    if core_name and not memory_name:
        return (
            f"{core_name} asks for GPU compute but no GPU memory: add koordinator.sh/gpu-memory-ratio "
            "(percent) or koordinator.sh/gpu-memory (bytes), or ask koordinator.sh/gpu for both at once"
        )
    return None


def shared_value(name: str, value: int) -> str | None:
    """gpu.shared: the number of cards the container shares, 1 or more."""
    if value < 1:
        return f"{name} is {value}; it must be the number of GPUs shared, 1 or more"
    return None


def shared_needs(shared_name: str, others: dict[str, tuple[str, int]]) -> list[str]:
    """Current Koordinator's gpu.shared rules (pkg/webhook/pod/validating/verify_device_resource.go,
    pkg/scheduler/plugins/deviceshare/utils.go ValidDeviceResourceCombinationsGPUShared): memory in
    bytes or as a ratio (one of them), core and ratio multiples of the count, at most 100 per card."""
    _, n = others["gpu.shared"]
    out: list[str] = []
    if "gpu" in others:
        out.append(f"{others['gpu'][0]} and {shared_name} cannot be asked together (Koordinator forbids both): ask "
                   f"{shared_name} with gpu-core and gpu-memory (or gpu-memory-ratio)")
    if "gpu-memory" not in others and "gpu-memory-ratio" not in others:
        out.append(f"{shared_name}={n} needs the memory it shares: add koordinator.sh/gpu-memory (bytes in all) or "
                   "koordinator.sh/gpu-memory-ratio (percent in all, a multiple of the count)")
    for dim in ("gpu-core", "gpu-memory-ratio"):
        if dim in others:
            name, v = others[dim]
            if v % n:
                out.append(f"{name}={v} must be a multiple of {shared_name}={n} (it is split evenly over the GPUs): "
                           f"write {v // n * n or n}")
            elif v // n > WHOLE_PERCENT:
                out.append(f"{name}={v} over {n} GPU(s) is {v // n} per GPU, more than 100: lower it to at most "
                           f"{n * WHOLE_PERCENT} or share more GPUs")
    return out


def same_count(core_name: str, core: int, ratio_name: str, ratio: int) -> str | None:
    """gpu-core and gpu-memory-ratio must ask for the same number of devices."""
    a, b = devices_for(core), devices_for(ratio)
    if a == b:
        return None
    return (
        f"{core_name}={core} asks for {a} GPU(s) but {ratio_name}={ratio} for {b}: above 100 both mean "
        f"whole GPUs, so write the same multiple of 100 in both (e.g. {max(a, b) * WHOLE_PERCENT} and "
        f"{max(a, b) * WHOLE_PERCENT}), or keep both at most 100 for a share of one GPU"
    )


def memory_split(memory_name: str, memory: int, count: int) -> str | None:
    """gpu-memory over several GPUs is split evenly: it must divide into whole bytes."""
    if count > 1 and memory % count:
        return (
            f"{memory_name}={memory} bytes cannot be split evenly over {count} GPUs: "
            f"use a multiple of {count} bytes (e.g. {memory // count * count})"
        )
    return None


def spelling(short: str, spellings: list[tuple[str, Any]]) -> str | None:
    """The koordinator.sh/ and kubernetes.io/ spellings of one name, when both given, must agree."""
    if len(spellings) > 1 and spellings[0][1] != spellings[1][1]:
        (a, va), (b, vb) = spellings[0], spellings[1]
        return f"{a}={va!r} and {b}={vb!r} ask for {short} twice with different values: keep only {a}"
    return None


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
# annotation codec

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


# ----------------------------------------------------------------------------------------------
# pods Koordinator placed


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
