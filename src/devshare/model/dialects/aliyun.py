"""Aliyun gpushare (seed 002): ``aliyun.com/gpu-mem`` (MiB) and ``aliyun.com/gpu-count``.

What the upstream code does (AliyunContainerService/gpushare-scheduler-extender and
gpushare-device-plugin): ``gpu-mem`` is the only resource a pod asks for; the whole pod lands on
one GPU, which must have that much memory free, and nothing is claimed of the GPU's compute.
``gpu-count`` is a *node* resource there: the device plugin patches the node's capacity with its
number of GPUs, and no pod asks for it.

devshare accepts ``gpu-count`` on a container as well, with ``gpu-mem`` keeping its upstream
meaning (the memory on *one* GPU, since the extender checks that a single GPU has it free):

- ``gpu-mem: M``: one GPU, M MiB on it, compute 0 (no compute claim).
- ``gpu-mem: M`` + ``gpu-count: N``: N GPUs with M MiB on each (N x M MiB in all).
- ``gpu-count: N`` alone: N whole GPUs.

Zero means "not asked" (upstream treats a pod with gpu-mem 0 as not sharing).

The annotations it writes at bind (seed 002, and what its extender writes):

- ``ALIYUN_COM_GPU_MEM_IDX``: the GPU index (several, comma-separated, when devshare spreads an
  Aliyun pod over several GPUs; upstream never does, its plugin reads a single index),
- ``ALIYUN_COM_GPU_MEM_POD``: the pod's ``aliyun.com/gpu-mem`` as written (MiB, summed over its
  containers), which the device plugin matches against its Allocate call,
- ``ALIYUN_COM_GPU_MEM_DEV``: the GPU's total memory (MiB), left out when not known,
- ``ALIYUN_COM_GPU_MEM_ASSUME_TIME``: when it was assumed (unix nanoseconds),
- ``ALIYUN_COM_GPU_MEM_ASSIGNED``: ``"false"`` at bind; the device plugin sets ``"true"``.

Seed 000's rule for one container over several shared cards (a node label and native-burst-share)
is mGPU's: an Aliyun ``gpu-mem`` over ``gpu-count`` cards is a memory share per card any node takes.
"""

from __future__ import annotations

from typing import Any

import msgspec

from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.codecs.units import index_list
from devshare.model.dialects.base import Dialect, PlacedGrant, PlacedReading, read_whole
from devshare.model.errors import InvalidAnnotation
from devshare.model.problems import Problems
from devshare.model.quantity import MIB
from devshare.model.request import WHOLE, DeviceRequest, PodRequest

ALIYUN_GPU_MEM = "aliyun.com/gpu-mem"
ALIYUN_GPU_COUNT = "aliyun.com/gpu-count"
ALIYUN_IDX = "ALIYUN_COM_GPU_MEM_IDX"
ALIYUN_POD = "ALIYUN_COM_GPU_MEM_POD"
ALIYUN_DEV = "ALIYUN_COM_GPU_MEM_DEV"
ALIYUN_ASSUME_TIME = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"
ALIYUN_ASSIGNED = "ALIYUN_COM_GPU_MEM_ASSIGNED"
ALIYUN_CONTAINER = "ALIYUN_COM_GPU_MEM_CONTAINER"  # env (set by the node agent): MiB the container asked
NAMES = frozenset({ALIYUN_GPU_MEM, ALIYUN_GPU_COUNT})

# ----------------------------------------------------------------------------------------------
# rules


def gpu_mem_value(value: int) -> str | None:
    if value < 0:
        return f"{ALIYUN_GPU_MEM} is {value}; it must be above 0 (MiB of memory on one GPU)"
    return None


def gpu_count_value(value: int) -> str | None:
    if value < 0:
        return (
            f"{ALIYUN_GPU_COUNT} is {value}; it must be 1 or more (the number of GPUs; "
            f"{ALIYUN_GPU_MEM} is then the memory on each)"
        )
    return None


# ----------------------------------------------------------------------------------------------
# reader


def read_container(resources: dict[str, Any], where: str, problems: Problems) -> list[DeviceRequest]:
    mem = read_whole(resources, ALIYUN_GPU_MEM, where, problems, "MiB")
    count = read_whole(resources, ALIYUN_GPU_COUNT, where, problems, "GPUs")
    msgs = [
        gpu_mem_value(mem) if mem is not None else None,
        gpu_count_value(count) if count is not None else None,
    ]
    if any(msgs):
        problems.extend(where, [m for m in msgs if m])
        return []
    mem = mem or 0
    count = count or 0
    if mem == 0 and count == 0:
        return []
    if mem == 0:
        return [DeviceRequest(type=names.GPU, count=count, core_milli=WHOLE, memory_ratio_milli=WHOLE)]
    return [DeviceRequest(type=names.GPU, count=max(count, 1), core_milli=0, memory=mem * MIB)]


# ----------------------------------------------------------------------------------------------
# annotation codec


class AliyunAllocation(msgspec.Struct, frozen=True, kw_only=True):
    minors: tuple[int, ...]
    pod_mib: int
    dev_mib: int | None = None
    assume_time_ns: int = 0
    assigned: bool = False


def encode_aliyun(a: AliyunAllocation) -> dict[str, str]:
    out = {
        ALIYUN_IDX: ",".join(str(m) for m in a.minors),
        ALIYUN_POD: str(a.pod_mib),
        ALIYUN_ASSUME_TIME: str(a.assume_time_ns),
        ALIYUN_ASSIGNED: "true" if a.assigned else "false",
    }
    if a.dev_mib is not None:
        out[ALIYUN_DEV] = str(a.dev_mib)
    return out


def _int(annotations: dict[str, str], key: str) -> int | None:
    if key not in annotations:
        return None
    text = str(annotations[key]).strip()
    if not (text.isascii() and text.isdigit()):
        raise InvalidAnnotation(f"must be a whole number >= 0, got {annotations[key]!r}", field=f"annotation {key}")
    return int(text)


def decode_aliyun(annotations: dict[str, str]) -> AliyunAllocation | None:
    """None when the pod carries no ``ALIYUN_COM_GPU_MEM_IDX``."""
    if ALIYUN_IDX not in annotations:
        return None
    assigned = str(annotations.get(ALIYUN_ASSIGNED, "false")).lower()
    if assigned not in ("true", "false"):
        raise InvalidAnnotation(f"must be true or false, got {assigned!r}", field=f"annotation {ALIYUN_ASSIGNED}")
    return AliyunAllocation(
        minors=tuple(index_list(str(annotations[ALIYUN_IDX]), field=f"annotation {ALIYUN_IDX}")),
        pod_mib=_int(annotations, ALIYUN_POD) or 0,
        dev_mib=_int(annotations, ALIYUN_DEV),
        assume_time_ns=_int(annotations, ALIYUN_ASSUME_TIME) or 0,
        assigned=assigned == "true",
    )


def aliyun_allocation(
    pod: PodRequest, alloc: PodAllocation, *, now_ns: int, device_memory: dict[int, int] | None = None
) -> AliyunAllocation:
    """What the Aliyun annotations say for ``alloc``: POD is the gpu-mem the pod asked (MiB, as
    written: per GPU), DEV the total memory of its first GPU when ``device_memory`` knows it."""
    minors = alloc.minors(names.GPU)
    pod_mib = sum(d.memory // MIB for c in pod.containers for d in c.devices if d.type == names.GPU)
    dev = (device_memory or {}).get(minors[0]) if minors else None
    return AliyunAllocation(
        minors=tuple(minors),
        pod_mib=pod_mib,
        dev_mib=dev // MIB if dev is not None else None,
        assume_time_ns=now_ns,
        assigned=False,
    )


# ----------------------------------------------------------------------------------------------
# pods Aliyun's extender placed


def read_placed(annotations: dict[str, str], spec: Any) -> PlacedReading | None:
    """A pod Aliyun's gpushare extender placed (AliyunContainerService/gpushare-scheduler-extender
    v0.2.0-3-gc0b6141, ``pkg/utils/pod.go``: ``GetUpdatedPodAnnotationSpec`` writes ``IDX`` (one GPU),
    ``DEV`` (that GPU's memory) and ``POD`` (the pod's ``aliyun.com/gpu-mem``), in the device plugin's
    unit, MiB or GiB): ``POD`` of ``DEV`` on the GPU ``IDX`` names, as a share of that GPU's memory (so
    the unit does not matter); without ``DEV``, ``POD`` MiB. No compute is claimed."""
    if ALIYUN_IDX not in annotations:
        return None
    field = f"annotation {ALIYUN_IDX}"
    try:
        minors = index_list(str(annotations[ALIYUN_IDX]), field=field)
        pod, dev = _int(annotations, ALIYUN_POD), _int(annotations, ALIYUN_DEV)
    except InvalidAnnotation as e:
        return PlacedReading(dialect="aliyun", problems=(f"{e}: every GPU of the node is counted as held",),
                             unreadable=(names.GPU,))
    if pod is None:
        return PlacedReading(dialect="aliyun", grants=tuple(PlacedGrant(minor=m, whole=True) for m in minors),
                             problems=(f"annotation {ALIYUN_POD} is missing: the pod's GPU is counted whole",))
    if dev:
        ratio = -(-pod * 1000 // dev)  # rounded up: never less than it holds
        grants = tuple(PlacedGrant(minor=m, core_milli=0, memory_ratio_milli=ratio) for m in minors)
    else:
        grants = tuple(PlacedGrant(minor=m, core_milli=0, memory=pod * MIB) for m in minors)
    return PlacedReading(dialect="aliyun", grants=grants)


# ----------------------------------------------------------------------------------------------
# the dialect


class AliyunDialect(Dialect):
    name = "aliyun"
    allocation_annotations = frozenset({ALIYUN_IDX, ALIYUN_POD, ALIYUN_DEV, ALIYUN_ASSUME_TIME, ALIYUN_ASSIGNED})
    resource_names = NAMES
    managed_resources = (ALIYUN_GPU_MEM, ALIYUN_GPU_COUNT)
    multi_card_share_needs_label = False

    def read(self, resources: dict[str, Any], where: str, problems: Problems, context: Any,
             index: int) -> list[DeviceRequest]:
        return read_container(resources, where, problems)

    def encode(self, pod: PodRequest, alloc: PodAllocation, *, now_ns: int,
               device_memory: dict[int, int] | None) -> dict[str, str]:
        if not alloc.minors(names.GPU):
            return {}
        return encode_aliyun(aliyun_allocation(pod, alloc, now_ns=now_ns, device_memory=device_memory))

    def read_placed(self, annotations: dict[str, str], spec: dict[str, Any]) -> PlacedReading | None:
        return read_placed(annotations, spec)
