"""All the annotations a scheduled pod gets: the canonical one, those of the dialect it asked in
(so that that dialect's node-side components work unchanged), and the group topology one."""

from __future__ import annotations

from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.codecs.aliyun import AliyunAllocation, encode_aliyun
from devshare.model.codecs.canonical import encode_canonical
from devshare.model.codecs.koordinator import encode_koordinator
from devshare.model.codecs.mgpu import encode_mgpu
from devshare.model.codecs.topology import encode_topology
from devshare.model.quantity import MIB
from devshare.model.request import PodRequest


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


def container_gpus(alloc: PodAllocation) -> dict[int, list[int]]:
    """Container index -> its GPU minors, for the containers that got GPUs."""
    out: dict[int, list[int]] = {}
    for i, c in enumerate(alloc.containers):
        minors = [g.minor for g in c.devices if g.type == names.GPU]
        if minors:
            out[i] = minors
    return out


def encode_annotations(
    pod: PodRequest,
    alloc: PodAllocation,
    *,
    now_ns: int,
    visible_gpus: list[int] | None = None,
    device_memory: dict[int, int] | None = None,
) -> dict[str, str]:
    """Every annotation to write on ``pod`` for ``alloc``.

    ``now_ns``: unix nanoseconds (Aliyun's assume time); ``visible_gpus``: the GPUs of the node
    given to the pod's group (adds the topology annotation); ``device_memory``: GPU minor -> total
    bytes (Aliyun's DEV)."""
    out = encode_canonical(alloc)
    has_gpus = bool(alloc.minors(names.GPU))  # mGPU and Aliyun only ever describe GPUs
    if pod.dialect in ("koordinator", "nvidia") and alloc.grants():
        out.update(encode_koordinator(alloc))
    elif pod.dialect == "mgpu" and has_gpus:
        out.update(encode_mgpu(alloc))
    elif pod.dialect == "aliyun" and has_gpus:
        out.update(encode_aliyun(aliyun_allocation(pod, alloc, now_ns=now_ns, device_memory=device_memory)))
    if visible_gpus is not None:
        out.update(encode_topology(container_gpus(alloc), visible_gpus))
    return out
