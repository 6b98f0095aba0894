"""Volcano's two GPU-sharing modes (volcano-sh/volcano's ``deviceshare`` plugin), one dialect each.

**vGPU** (HAMi-core on the node, Volcano's ``volcano-vgpu-device-plugin``): ``volcano.sh/vgpu-number``
(cards, each shared), ``volcano.sh/vgpu-memory`` (MiB per card), ``volcano.sh/vgpu-memory-percentage``
(percent of the card's memory), ``volcano.sh/vgpu-cores`` (percent of the card's compute). Pinned from
volcano-sh/volcano v1.16.0-alpha.1-42-ged72c7c8: ``pkg/scheduler/api/devices/util.go``
(``ExtractResourceRequest``: ``vgpu-memory`` alone is one card; no memory given is the whole card's;
cores default 0), ``pkg/scheduler/api/devices/config/vgpu.go`` (the names),
``pkg/scheduler/api/devices/nvidia/vgpu/device_info.go`` (``Allocate``: the annotations) and
``type.go`` (their keys). Volcano reads app containers only; so does this dialect (an init container
asking these names is refused, as Volcano cannot give it any).

Annotations, as Volcano's ``Allocate`` writes them (the device plugin, Project-HAMi/volcano-vgpu-device-plugin
``pkg/plugin/vgpu/util/util.go``, finds the pod by ``volcano.sh/vgpu-node`` + ``volcano.sh/bind-phase:
allocating`` + the oldest ``volcano.sh/vgpu-time``, and takes container *i*'s devices from entry *i* of
``volcano.sh/devices-to-allocate``: devshare writes one entry per app container)::

    volcano.sh/vgpu-node: node-1
    volcano.sh/vgpu-time: "1767225600"
    volcano.sh/bind-time: "1767225600"
    volcano.sh/bind-phase: allocating
    volcano.sh/vgpu-ids-new: "GPU-0c6c...,NVIDIA,3000,30:"
    volcano.sh/devices-to-allocate: "GPU-0c6c...,NVIDIA,3000,30:"

**gpushare** (Volcano's ``volcano-sh/devices`` plugin): ``volcano.sh/gpu-memory`` (MiB on one card, no
compute claimed); the pod's amount is the larger of its largest init container and the sum of its
app containers (``pkg/scheduler/api/devices/nvidia/gpushare/share.go``, ``getGPUMemoryOfPod``), on one
card; ``volcano.sh/gpu-number``: whole cards (``getGPUNumberOfPod``). Annotations
(``gpuIndexAnnotations``): ``volcano.sh/gpu-index: "1"`` (``"0,1"`` for whole cards) and
``volcano.sh/predicate-time`` (unix nanoseconds); the device plugin serves the pending pod of the
oldest predicate time and sets ``volcano.sh/gpu-assigned: "true"``.
"""

from __future__ import annotations

from typing import Any

from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.codecs import vgpu
from devshare.model.codecs.units import index_list
from devshare.model.dialects import hami
from devshare.model.dialects.base import (
    Dialect,
    PlacedGrant,
    PlacedReading,
    read_whole,
    spec_containers,
    whole_quantity,
)
from devshare.model.errors import InvalidAnnotation
from devshare.model.problems import Problems
from devshare.model.quantity import MIB
from devshare.model.request import MAX_DEVICES, WHOLE, WHOLE_PERCENT, DeviceRequest, PodRequest

VGPU_NUMBER = "volcano.sh/vgpu-number"
VGPU_MEMORY = "volcano.sh/vgpu-memory"
VGPU_MEMORY_PERCENTAGE = "volcano.sh/vgpu-memory-percentage"
VGPU_CORES = "volcano.sh/vgpu-cores"
VGPU_NAMES = frozenset({VGPU_NUMBER, VGPU_MEMORY, VGPU_MEMORY_PERCENTAGE, VGPU_CORES})

VGPU_NODE = "volcano.sh/vgpu-node"
VGPU_TIME = "volcano.sh/vgpu-time"
VGPU_IDS = "volcano.sh/vgpu-ids-new"
VGPU_TO_ALLOCATE = "volcano.sh/devices-to-allocate"
VGPU_BIND_TIME = "volcano.sh/bind-time"
VGPU_BIND_PHASE = "volcano.sh/bind-phase"
VGPU_REGISTER = "volcano.sh/node-vgpu-register"  # node annotation: the node's cards (devshare.model.inventory)

GPUSHARE_MEMORY = "volcano.sh/gpu-memory"
GPUSHARE_NUMBER = "volcano.sh/gpu-number"  # whole cards (read on placed pods; not a dialect name here)
GPUSHARE_INDEX = "volcano.sh/gpu-index"
GPUSHARE_PREDICATE_TIME = "volcano.sh/predicate-time"
GPUSHARE_ASSIGNED = "volcano.sh/gpu-assigned"

# ----------------------------------------------------------------------------------------------
# vGPU


def read_vgpu(resources: dict[str, Any], where: str, problems: Problems) -> list[DeviceRequest]:
    n = read_whole(resources, VGPU_NUMBER, where, problems, "GPUs")
    mem = read_whole(resources, VGPU_MEMORY, where, problems, "MiB")
    pct = read_whole(resources, VGPU_MEMORY_PERCENTAGE, where, problems, "percent")
    cores = read_whole(resources, VGPU_CORES, where, problems, "percent")
    if any(resources.get(k) is not None and v is None for k, v in
           ((VGPU_NUMBER, n), (VGPU_MEMORY, mem), (VGPU_MEMORY_PERCENTAGE, pct), (VGPU_CORES, cores))):
        return []
    msgs = []
    if n is not None and n < 0:
        msgs.append(f"{VGPU_NUMBER} is {n}; it must be the number of cards, 1 or more")
    if mem is not None and mem < 0:
        msgs.append(f"{VGPU_MEMORY} is {mem}; it must be above 0 (MiB of card memory per card)")
    for name, v, what in ((VGPU_MEMORY_PERCENTAGE, pct, "memory"), (VGPU_CORES, cores, "compute")):
        if v is not None and not 0 <= v <= WHOLE_PERCENT:
            msgs.append(f"{name} is {v}; it must be from 0 to 100 (percent of one card's {what})")
    if not msgs and (mem or 0) > 0 and (pct or 0) > 0:
        msgs.append(f"{VGPU_MEMORY}={mem} and {VGPU_MEMORY_PERCENTAGE}={pct} both ask for the card's memory: keep one")
    if not msgs and not n and (mem or pct or cores) and not mem:
        msgs.append(f"{VGPU_NUMBER} is not given: Volcano reads a container without it only from {VGPU_MEMORY} "
                    f"(one card); add {VGPU_NUMBER} (the number of cards)")
    if msgs:
        problems.extend(where, msgs)
        return []
    count = n if n else (1 if mem else 0)
    if count == 0 or count > MAX_DEVICES:
        return []
    mem, pct = mem or 0, pct or 0
    ratio = pct * 10 if pct else (0 if mem else WHOLE)  # no memory given: the whole card's (Volcano: 100%)
    return [DeviceRequest(type=names.GPU, count=count, core_milli=(cores or 0) * 10, memory=mem * MIB,
                          memory_ratio_milli=ratio)]


def encode_vgpu(pod: PodRequest, alloc: PodAllocation, now_ns: int) -> dict[str, str]:
    by_name = {c.name: c for c in alloc.containers if not c.init}
    per_container = [[vgpu.VgpuDevice(uuid=g.id or str(g.minor), type=hami.HAMI_TYPE, memory_mib=g.memory // MIB,
                                      cores=g.core_milli // 10)
                      for g in (by_name[c.name].devices if c.name in by_name else ()) if g.type == names.GPU]
                     for c in pod.containers]
    devices = vgpu.encode_containers(per_container, trailing=False)
    seconds = str(now_ns // 1_000_000_000)
    return {VGPU_NODE: alloc.node, VGPU_TIME: seconds, VGPU_BIND_TIME: seconds, VGPU_BIND_PHASE: "allocating",
            VGPU_IDS: devices, VGPU_TO_ALLOCATE: devices}


class VolcanoVgpuDialect(Dialect):
    name = "volcano-vgpu"
    resource_names = VGPU_NAMES
    managed_resources = (VGPU_NUMBER, VGPU_MEMORY, VGPU_MEMORY_PERCENTAGE, VGPU_CORES)
    allocation_annotations = frozenset({VGPU_IDS, VGPU_NODE})  # the device plugin rewrites the others
    multi_card_share_needs_label = False
    init_containers = False  # Volcano gives init containers no vGPU

    def read(self, resources: dict[str, Any], where: str, problems: Problems, context: Any,
             index: int) -> list[DeviceRequest]:
        return read_vgpu(resources, where, problems)

    def encode(self, pod: PodRequest, alloc: PodAllocation, *, now_ns: int,
               device_memory: dict[int, int] | None) -> dict[str, str]:
        return encode_vgpu(pod, alloc, now_ns) if alloc.minors(names.GPU) else {}

    def read_placed(self, annotations: dict[str, str], spec: dict[str, Any]) -> PlacedReading | None:
        reading = hami.read_placed(annotations, spec, key=VGPU_IDS, node_key=VGPU_NODE, dialect=self.name,
                                   spec_has_init=False)
        if reading is None or len(reading.grants) == 0:
            return reading
        # Volcano lists only the containers that ask for vGPUs, in order: name them so
        _, app = spec_containers(spec)
        asking = [n for n, res in app if any(res.get(k) not in (None, "0", 0) for k in VGPU_NAMES)]
        entries = sorted({g.container for g in reading.grants if g.container.startswith("#")})
        if entries and len(asking) >= len(entries):
            rename = {f"#{i}": name for i, name in enumerate(asking)}
            grants = tuple(PlacedGrant(container=rename.get(g.container, g.container), id=g.id,
                                       core_milli=g.core_milli, memory=g.memory) for g in reading.grants)
            problems = tuple(p for p in reading.problems if "container(s) but the pod has" not in p)
            return PlacedReading(dialect=reading.dialect, node=reading.node, grants=grants, problems=problems,
                                 unreadable=reading.unreadable)
        return reading


# ----------------------------------------------------------------------------------------------
# gpushare


def read_gpushare(resources: dict[str, Any], where: str, problems: Problems) -> list[DeviceRequest]:
    mem = read_whole(resources, GPUSHARE_MEMORY, where, problems, "MiB")
    count = read_whole(resources, GPUSHARE_NUMBER, where, problems, "GPUs")
    msgs = []
    if mem is not None and mem < 0:
        msgs.append(f"{GPUSHARE_MEMORY} is {mem}; it must be above 0 (MiB of memory on one card)")
    if count is not None and count < 0:
        msgs.append(f"{GPUSHARE_NUMBER} is {count}; it must be the number of whole cards, 1 or more")
    if not msgs and mem and count:
        msgs.append(f"{GPUSHARE_MEMORY} and {GPUSHARE_NUMBER} both ask for cards (Volcano then reads the memory "
                    f"alone): keep {GPUSHARE_MEMORY} for a share of one card, or {GPUSHARE_NUMBER} for whole cards")
    if msgs:
        problems.extend(where, msgs)
        return []
    if count:
        return [DeviceRequest(type=names.GPU, count=count, core_milli=WHOLE, memory_ratio_milli=WHOLE)]
    if not mem:
        return []
    return [DeviceRequest(type=names.GPU, count=1, core_milli=0, memory=mem * MIB)]


def _pod_mib(spec: Any, name: str) -> int:
    """Volcano's pod amount: the larger of the largest init container's and the app containers' sum."""
    init, app = spec_containers(spec)
    value = [whole_quantity(res.get(name)) or 0 for _, res in app]
    first = max((whole_quantity(res.get(name)) or 0 for _, res in init), default=0)
    return max(sum(value), first)


def read_gpushare_placed(annotations: dict[str, str], spec: Any) -> PlacedReading | None:
    text = annotations.get(GPUSHARE_INDEX)
    if text is None:
        return None
    try:
        minors = index_list(str(text), field=f"annotation {GPUSHARE_INDEX}")
    except InvalidAnnotation as e:
        return PlacedReading(dialect="volcano-gpushare", problems=(str(e),), unreadable=(names.GPU,))
    mib, count = _pod_mib(spec, GPUSHARE_MEMORY), _pod_mib(spec, GPUSHARE_NUMBER)
    if count > 0 or mib == 0:  # gpu-number: whole cards (no amount at all: counted whole, conservatively)
        problems = () if count > 0 else (f"annotation {GPUSHARE_INDEX} names GPU(s) {text} but the pod asks for no "
                                         f"{GPUSHARE_MEMORY} or {GPUSHARE_NUMBER}: counted as whole cards",)
        return PlacedReading(dialect="volcano-gpushare", problems=problems,
                             grants=tuple(PlacedGrant(minor=m, whole=True) for m in minors))
    return PlacedReading(dialect="volcano-gpushare",
                         grants=tuple(PlacedGrant(minor=m, core_milli=0, memory=mib * MIB) for m in minors))


def encode_gpushare(alloc: PodAllocation, now_ns: int) -> dict[str, str]:
    return {GPUSHARE_INDEX: ",".join(str(m) for m in alloc.minors(names.GPU)),
            GPUSHARE_PREDICATE_TIME: str(now_ns), GPUSHARE_ASSIGNED: "false"}


class VolcanoGpushareDialect(Dialect):
    name = "volcano-gpushare"
    resource_names = frozenset({GPUSHARE_MEMORY, GPUSHARE_NUMBER})
    managed_resources = (GPUSHARE_MEMORY, GPUSHARE_NUMBER)
    allocation_annotations = frozenset({GPUSHARE_INDEX})
    multi_card_share_needs_label = False
    one_card_per_pod = True

    def read(self, resources: dict[str, Any], where: str, problems: Problems, context: Any,
             index: int) -> list[DeviceRequest]:
        return read_gpushare(resources, where, problems)

    def encode(self, pod: PodRequest, alloc: PodAllocation, *, now_ns: int,
               device_memory: dict[int, int] | None) -> dict[str, str]:
        return encode_gpushare(alloc, now_ns) if alloc.minors(names.GPU) else {}

    def read_placed(self, annotations: dict[str, str], spec: dict[str, Any]) -> PlacedReading | None:
        return read_gpushare_placed(annotations, spec)
