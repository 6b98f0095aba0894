"""HAMi (Project-HAMi/HAMi): ``nvidia.com/gpu`` as a number of vGPUs, each a share of one card, with
``nvidia.com/gpumem`` (MiB per vGPU), ``nvidia.com/gpumem-percentage`` (percent of the card's memory)
and ``nvidia.com/gpucores`` (percent of the card's compute), and the pod annotations HAMi's scheduler
writes, which HAMi's device plugin and HAMi-core read on the node.

Pinned from Project-HAMi/HAMi v2.10.0 (commit 4707fb02), ``pkg/device/nvidia/device.go``
(``GenerateResourceRequests``, ``MutateAdmission``, ``defaultExclusiveCoreIfNeeded``,
``validateMemoryPercentage``, ``PatchAnnotations``) and ``pkg/scheduler/scheduler.go`` (``Filter``,
``Bind``), with the Helm chart's defaults (``defaultMem: 0``, ``defaultCores: 0``, ``defaultGPUNum: 1``):

- ``nvidia.com/gpu: N`` vGPUs, N distinct cards; given ``gpumem``, ``gpumem-percentage`` or
  ``gpucores`` alone, HAMi's webhook adds ``nvidia.com/gpu: 1``.
- memory: ``gpumem`` MiB, else ``gpumem-percentage`` percent (0 is "not given"), else the whole card's
  memory (100%).
- compute: ``gpucores`` percent; when it is not given and the memory is the whole card's, 100 (HAMi's
  webhook makes such a container exclusive); otherwise 0 (no compute claimed: the default cores).

The companion names decide that ``nvidia.com/gpu`` is HAMi's and not NVIDIA's: a container giving
one of them is read here whole (:meth:`HamiDialect.absorbs`), and a pod with such a container is
HAMi's, its other containers' bare ``nvidia.com/gpu`` included (HAMi's defaults make those whole
cards, which is what NVIDIA's reading gives too). In a cluster where HAMi's device plugin serves
``nvidia.com/gpu``, the configuration's ``scheduling.nvidiaGpu: hami`` makes every bare
``nvidia.com/gpu`` pod HAMi's (:func:`devshare.model.dialects.configure_nvidia_gpu`).

Unlike HAMi, devshare refuses what HAMi clamps or ignores with only a log line: ``gpucores`` above
100, ``gpumem-percentage`` above 100, and ``gpumem`` beside ``gpumem-percentage`` (HAMi silently
keeps ``gpumem``).

The annotations (HAMi's scheduler at filter and bind; HAMi's device plugin finds the pod by
``hami.io/vgpu-node`` + ``hami.io/bind-phase: allocating`` + ``hami.io/bind-time`` and takes each
container's devices from ``hami.io/vgpu-devices-to-allocate``, init containers first, then the app
containers, one entry per container: :mod:`devshare.model.codecs.vgpu`)::

    hami.io/vgpu-node: node-1
    hami.io/vgpu-time: "1767225600"
    hami.io/bind-time: "1767225600"
    hami.io/bind-phase: allocating
    hami.io/vgpu-devices-allocated:   "GPU-0c6c...,NVIDIA,3000,30:;"
    hami.io/vgpu-devices-to-allocate: "GPU-0c6c...,NVIDIA,3000,30:;"

Taking over (:meth:`HamiDialect.read_placed`): a pod HAMi placed holds what
``hami.io/vgpu-devices-allocated`` lists (``to-allocate`` is emptied by the device plugin as it
hands devices out), on the node ``hami.io/vgpu-node`` names. Since v2.6 the entries are per init
container, then per app container; older releases list app containers only: the number of entries
tells which.
"""

from __future__ import annotations

from typing import Any

from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.codecs import vgpu
from devshare.model.dialects.base import (
    Dialect,
    PlacedGrant,
    PlacedReading,
    read_whole,
    restartable_init,
    spec_containers,
)
from devshare.model.problems import Problems
from devshare.model.quantity import MIB
from devshare.model.request import MAX_DEVICES, WHOLE, WHOLE_PERCENT, DeviceRequest, PodRequest

NVIDIA_GPU = "nvidia.com/gpu"  # the count: NVIDIA's name, HAMi's when a companion is given
HAMI_GPUMEM = "nvidia.com/gpumem"
HAMI_GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
HAMI_GPUCORES = "nvidia.com/gpucores"
NAMES = frozenset({HAMI_GPUMEM, HAMI_GPUMEM_PERCENTAGE, HAMI_GPUCORES})

HAMI_NODE = "hami.io/vgpu-node"
HAMI_TIME = "hami.io/vgpu-time"
HAMI_BIND_TIME = "hami.io/bind-time"
HAMI_BIND_PHASE = "hami.io/bind-phase"
HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
HAMI_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
HAMI_REGISTER = "hami.io/node-nvidia-register"  # node annotation: the node's cards (devshare.model.inventory)
HAMI_TYPE = "NVIDIA"
BIND_ALLOCATING = "allocating"

# ----------------------------------------------------------------------------------------------
# rules


def count_value(n: int) -> str | None:
    if n < 1:
        return f"{NVIDIA_GPU} is {n}; with HAMi's names it is the number of vGPUs (cards shared), 1 or more"
    return None


def percent_value(name: str, value: int, what: str) -> str | None:
    if value < 0 or value > WHOLE_PERCENT:
        return f"{name} is {value}; it must be from 0 to 100 (percent of one card's {what})"
    return None


def memory_value(value: int) -> str | None:
    if value < 0:
        return f"{HAMI_GPUMEM} is {value}; it must be above 0 (MiB of card memory per vGPU)"
    return None


def one_memory(mem: int, pct: int) -> str | None:
    """gpumem and gpumem-percentage both ask for memory (HAMi keeps gpumem without a word)."""
    if mem > 0 and pct > 0:
        return (f"{HAMI_GPUMEM}={mem} and {HAMI_GPUMEM_PERCENTAGE}={pct} both ask for the card's memory: keep one "
                f"({HAMI_GPUMEM} in MiB, or {HAMI_GPUMEM_PERCENTAGE} in percent)")
    return None


# ----------------------------------------------------------------------------------------------
# reader


def read_container(resources: dict[str, Any], where: str, problems: Problems) -> list[DeviceRequest]:
    """One container's request in HAMi's names (``nvidia.com/gpu`` read as HAMi's vGPU count)."""
    n = read_whole(resources, NVIDIA_GPU, where, problems, "GPUs")
    mem = read_whole(resources, HAMI_GPUMEM, where, problems, "MiB")
    pct = read_whole(resources, HAMI_GPUMEM_PERCENTAGE, where, problems, "percent")
    cores = read_whole(resources, HAMI_GPUCORES, where, problems, "percent")
    if n is None and NVIDIA_GPU in resources:
        return []  # unreadable: already a problem
    if any(resources.get(k) is not None and v is None for k, v in
           ((HAMI_GPUMEM, mem), (HAMI_GPUMEM_PERCENTAGE, pct), (HAMI_GPUCORES, cores))):
        return []
    count = 1 if n is None else n  # HAMi's webhook: defaultGPUNum (1) when only a companion is given
    msgs = [count_value(count) if n is not None and n != 0 else None,
            memory_value(mem) if mem is not None else None,
            percent_value(HAMI_GPUMEM_PERCENTAGE, pct, "memory") if pct is not None else None,
            percent_value(HAMI_GPUCORES, cores, "compute") if cores is not None else None]
    msgs.append(one_memory(mem or 0, pct or 0) if not any(msgs) else None)
    if any(msgs):
        problems.extend(where, [m for m in msgs if m])
        return []
    if n == 0 or count > MAX_DEVICES:
        return []
    mem, pct = mem or 0, pct or 0
    ratio = pct * 10 if pct else (0 if mem else WHOLE)  # no memory given: the whole card's (HAMi: 100%)
    if cores is None:
        cores = WHOLE_PERCENT if ratio >= WHOLE else 0  # defaultExclusiveCoreIfNeeded, else defaultCores 0
    return [DeviceRequest(type=names.GPU, count=count, core_milli=cores * 10, memory=mem * MIB,
                          memory_ratio_milli=ratio)]


# ----------------------------------------------------------------------------------------------
# annotation codec


def container_devices(pod: PodRequest, alloc: PodAllocation) -> list[list[vgpu.VgpuDevice]]:
    """HAMi's per-container lists: every init container (in spec order), then every app container,
    each with the GPUs its allocation gives (empty for a container that got none)."""
    by_name = {c.name: c for c in alloc.containers}
    order = [c.name for c in pod.init_containers] + [c.name for c in pod.containers]
    out: list[list[vgpu.VgpuDevice]] = []
    for name in order:
        c = by_name.get(name)
        out.append([vgpu.VgpuDevice(uuid=g.id or str(g.minor), type=HAMI_TYPE, memory_mib=g.memory // MIB,
                                    cores=g.core_milli // 10)
                    for g in (c.devices if c is not None else ()) if g.type == names.GPU])
    return out


def encode_hami(pod: PodRequest, alloc: PodAllocation, now_ns: int) -> dict[str, str]:
    devices = vgpu.encode_containers(container_devices(pod, alloc), trailing=True)
    seconds = str(now_ns // 1_000_000_000)
    return {HAMI_NODE: alloc.node, HAMI_TIME: seconds, HAMI_BIND_TIME: seconds, HAMI_BIND_PHASE: BIND_ALLOCATING,
            HAMI_ALLOCATED: devices, HAMI_TO_ALLOCATE: devices}


def read_placed(annotations: dict[str, str], spec: Any, *, key: str = HAMI_ALLOCATED, node_key: str = HAMI_NODE,
                dialect: str = "hami", spec_has_init: bool = True) -> PlacedReading | None:
    """A pod placed by HAMi (or, with Volcano's keys, by Volcano's vGPU support)."""
    text = annotations.get(key)
    if text is None and key == HAMI_ALLOCATED:
        text = annotations.get(HAMI_TO_ALLOCATE)
    if text is None:
        return None
    node = annotations.get(node_key) or None
    entries, problems = vgpu.decode_containers(str(text))
    init, app = spec_containers(spec)
    sidecars = restartable_init(spec)
    if spec_has_init and len(entries) == len(init) + len(app):
        named = [(n, n not in sidecars) for n, _ in init] + [(n, False) for n, _ in app]
    elif len(entries) == len(app):
        named = [(n, False) for n, _ in app]
    else:
        named = [(f"#{i}", False) for i in range(len(entries))]
        if entries and any(entries):
            problems.append(f"annotation {key} lists {len(entries)} container(s) but the pod has {len(init)} init "
                            f"and {len(app)} app container(s): counted per card, summed")
    grants = [PlacedGrant(container=name, init=is_init, id=vgpu.card_uuid(d.uuid), core_milli=d.cores * 10,
                          memory=d.memory_mib * MIB)
              for (name, is_init), devices in zip(named, entries, strict=True) for d in devices]
    return PlacedReading(dialect=dialect, node=node, grants=tuple(grants),
                         problems=tuple(f"annotation {key}: {p}" for p in problems),
                         unreadable=(names.GPU,) if problems and not grants else ())


# ----------------------------------------------------------------------------------------------
# the dialect


class HamiDialect(Dialect):
    name = "hami"
    resource_names = NAMES
    managed_resources = (HAMI_GPUMEM, HAMI_GPUMEM_PERCENTAGE, HAMI_GPUCORES)
    # only what HAMi's node side never rewrites: its device plugin empties to-allocate and sets the phase
    allocation_annotations = frozenset({HAMI_ALLOCATED, HAMI_NODE})
    multi_card_share_needs_label = False  # HAMi's nvidia.com/gpu: N is N cards with a share each, on any node

    def absorbs(self, other: str, resources: dict[str, Any]) -> bool:
        return other == "nvidia"

    def carries(self, other: str, resources: dict[str, Any] | None) -> bool:
        return other == "nvidia" and resources is None  # a bare nvidia.com/gpu in another container of the pod

    def read(self, resources: dict[str, Any], where: str, problems: Problems, context: Any,
             index: int) -> list[DeviceRequest]:
        return read_container(resources, where, problems)

    def encode(self, pod: PodRequest, alloc: PodAllocation, *, now_ns: int,
               device_memory: dict[int, int] | None) -> dict[str, str]:
        return encode_hami(pod, alloc, now_ns) if alloc.minors(names.GPU) else {}

    def read_placed(self, annotations: dict[str, str], spec: dict[str, Any]) -> PlacedReading | None:
        return read_placed(annotations, spec)
