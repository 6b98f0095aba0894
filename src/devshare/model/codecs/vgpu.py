"""HAMi's device list on the wire, which Volcano's vGPU support writes too: per container, every
device as ``UUID,TYPE,MEMORY_MIB,CORES`` followed by ``:``; containers joined by ``;``.

Pinned from Project-HAMi/HAMi v2.10.0 ``pkg/device/devices.go`` (``EncodeContainerDevices``,
``EncodePodSingleDevice``: a ``;`` after every container, ``DecodeContainerDevices``) and from
volcano-sh/volcano (v1.16.0-alpha.1-42-ged72c7c8) ``pkg/scheduler/api/devices/nvidia/vgpu/utils.go``
(``encodeContainerDevices``, ``encodePodDevices``: containers *joined* by ``;``, no trailing one)::

    GPU-0c6c...,NVIDIA,3000,30:;;GPU-7f64...,NVIDIA,8000,0:GPU-98583a5c...,NVIDIA,8000,0:;
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

DEVICE_SEP = ":"
CONTAINER_SEP = ";"


class VgpuDevice(msgspec.Struct, frozen=True, kw_only=True):
    uuid: str
    type: str = "NVIDIA"
    memory_mib: int = 0
    cores: int = 0


def encode_container(devices: Sequence[VgpuDevice]) -> str:
    return "".join(f"{d.uuid},{d.type},{d.memory_mib},{d.cores}{DEVICE_SEP}" for d in devices)


def encode_containers(containers: Sequence[Sequence[VgpuDevice]], *, trailing: bool) -> str:
    """Every container's devices; ``trailing``: HAMi's ``;`` after each container (Volcano's has none)."""
    parts = [encode_container(c) for c in containers]
    return "".join(p + CONTAINER_SEP for p in parts) if trailing else CONTAINER_SEP.join(parts)


def decode_containers(text: str) -> tuple[list[list[VgpuDevice]], list[str]]:
    """The devices of each container (a trailing ``;`` adds no container), and a problem for every
    entry that is not ``UUID,TYPE,MEMORY,CORES`` with whole numbers >= 0 (that entry is left out)."""
    problems: list[str] = []
    parts = text.split(CONTAINER_SEP)
    if text.endswith(CONTAINER_SEP):
        parts = parts[:-1]
    out: list[list[VgpuDevice]] = []
    for ci, part in enumerate(parts):
        devices: list[VgpuDevice] = []
        for entry in part.split(DEVICE_SEP):
            if not entry.strip():
                continue
            fields = [f.strip() for f in entry.split(",")]
            if len(fields) < 4 or not fields[0]:
                problems.append(f"container entry {ci}: {entry!r} is not UUID,TYPE,MEMORY,CORES")
                continue
            mem, cores = fields[2], fields[3]
            if not (mem.isascii() and mem.isdigit() and cores.isascii() and cores.isdigit()):
                problems.append(f"container entry {ci}: {entry!r}: memory (MiB) and cores (percent) must be whole "
                                "numbers >= 0")
                continue
            devices.append(VgpuDevice(uuid=fields[0], type=fields[1], memory_mib=int(mem), cores=int(cores)))
        out.append(devices)
    return out, problems


def card_uuid(uuid: str) -> str:
    """The physical card of a device id: HAMi's MIG instances (``GPU-x[1g.10gb-0]``) and time-sliced
    replicas (``GPU-x::3``) name the card they live on."""
    return uuid.split("[", 1)[0].split("::", 1)[0]
