"""What a container is handed: environment variables (and device files) for its allocation.

GPUs:

- ``NVIDIA_VISIBLE_DEVICES``: the UUIDs of the container's GPUs (the NVIDIA container runtime
  exposes exactly these). For a seed-003 group pod (``topology.scheduling.koordinator.sh/gpu``):
  the group's visible GPUs, and ``CUDA_VISIBLE_DEVICES`` = the container's allocated GPUs, as
  UUIDs (CUDA accepts UUIDs there, which does not depend on the device enumeration order).
- Limits for an isolation layer, per GPU in the order of the container's GPUs:
  ``DEVSHARE_GPU_MEMORY_LIMIT`` (bytes, comma separated), ``DEVSHARE_GPU_CORE_LIMIT`` (percent of
  the card), and the variables HAMi-core (libvgpu) enforces: ``CUDA_DEVICE_MEMORY_LIMIT_<i>``
  (``<MiB>m``) and ``CUDA_DEVICE_SM_LIMIT`` (percent; the largest of the container's shares).
  Only for shared grants (less than a whole card).
- Aliyun dialect (a container asking ``aliyun.com/gpu-mem``): ``ALIYUN_COM_GPU_MEM_IDX`` (minors),
  ``ALIYUN_COM_GPU_MEM_POD``, ``ALIYUN_COM_GPU_MEM_CONTAINER`` (MiB asked), ``ALIYUN_COM_GPU_MEM_DEV``
  (MiB of the card), as Aliyun's device plugin sets them.

RDMA / FPGA: ``DEVSHARE_RDMA_DEVICES`` / ``DEVSHARE_FPGA_DEVICES`` (ids) and the device files the
configuration lists for them.
"""

from __future__ import annotations

import msgspec

from devshare.agent.inventory import Inventory
from devshare.agent.matching import AllocateError, PendingPod
from devshare.model import names
from devshare.model.allocation import DeviceGrant
from devshare.model.codecs import decode_topology
from devshare.model.dialects import aliyun
from devshare.model.errors import InvalidInput
from devshare.model.quantity import MIB
from devshare.model.request import WHOLE


class ContainerDevices(msgspec.Struct, frozen=True, kw_only=True):
    envs: dict[str, str]
    device_files: tuple[str, ...] = ()


def _grants(pod: PendingPod, container: str, device_type: str) -> list[DeviceGrant]:
    for c in pod.allocation.containers:
        if c.name == container:
            return [g for g in c.devices if g.type == device_type]
    return []


def _gpu_uuid(inv: Inventory, minor: int, granted_id: str, *, where: str) -> str:
    gpu = inv.gpu_by_minor(minor)
    if gpu is None:
        raise AllocateError(f"{where}: the allocation names GPU minor {minor}, which this node does not have")
    if granted_id and granted_id != gpu.uuid:
        raise AllocateError(
            f"{where}: the allocation names GPU {granted_id} at minor {minor}, but this node's minor {minor} "
            f"is {gpu.uuid}; the Device object is stale, reschedule the pod"
        )
    return gpu.uuid


def gpu_devices(pod: PendingPod, container: str, inv: Inventory) -> ContainerDevices:
    where = f"{pod.key}/{container}"
    grants = _grants(pod, container, names.GPU)
    if not grants:
        raise AllocateError(f"{where}: asks for GPUs but its devshare allocation gives it none")
    uuids = [_gpu_uuid(inv, g.minor, g.id, where=where) for g in grants]
    envs: dict[str, str] = {"NVIDIA_VISIBLE_DEVICES": ",".join(uuids)}
    try:
        topo = decode_topology(pod.annotations)
    except InvalidInput as e:
        raise AllocateError(f"{where}: {e}") from None
    if topo is not None:
        allocated, visible = topo
        try:
            index = pod.app_containers.index(container)
        except ValueError:
            index = -1
        mine = allocated.get(index)
        if mine:
            envs["NVIDIA_VISIBLE_DEVICES"] = ",".join(_gpu_uuid(inv, m, "", where=where) for m in visible)
            envs["CUDA_VISIBLE_DEVICES"] = ",".join(_gpu_uuid(inv, m, "", where=where) for m in mine)
    shared = [g for g in grants if g.core_milli < WHOLE or memory_limit(g, inv) < _total(g, inv)]
    if shared:
        envs["DEVSHARE_GPU_MEMORY_LIMIT"] = ",".join(str(memory_limit(g, inv)) for g in grants)
        envs["DEVSHARE_GPU_CORE_LIMIT"] = ",".join(f"{g.core_milli / 10:g}" for g in grants)
        for i, g in enumerate(grants):
            envs[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] = f"{memory_limit(g, inv) // MIB}m"
        envs["CUDA_DEVICE_SM_LIMIT"] = f"{max(g.core_milli for g in grants) // 10}"
    ask = next((c for c in pod.containers if c.name == container), None)
    if ask is not None and aliyun.ALIYUN_GPU_MEM in ask.amounts:
        pod_mib = sum(c.amounts.get(aliyun.ALIYUN_GPU_MEM, 0) for c in pod.containers if not c.init)
        envs[aliyun.ALIYUN_IDX] = ",".join(str(g.minor) for g in grants)
        envs[aliyun.ALIYUN_POD] = str(pod_mib)
        envs[aliyun.ALIYUN_CONTAINER] = str(ask.amounts[aliyun.ALIYUN_GPU_MEM])
        envs[aliyun.ALIYUN_DEV] = str(_total(grants[0], inv) // MIB)
    return ContainerDevices(envs=envs)


def _total(g: DeviceGrant, inv: Inventory) -> int:
    gpu = inv.gpu_by_minor(g.minor)
    return gpu.memory if gpu is not None else 0


def memory_limit(g: DeviceGrant, inv: Inventory) -> int:
    """The GPU memory (bytes) of a grant: its bytes, else its ratio (or compute share) of the card."""
    if g.memory:
        return g.memory
    return _total(g, inv) * (g.memory_ratio_milli or g.core_milli) // WHOLE


def other_devices(pod: PendingPod, container: str, inv: Inventory, device_type: str) -> ContainerDevices:
    where = f"{pod.key}/{container}"
    grants = _grants(pod, container, device_type)
    if not grants:
        raise AllocateError(f"{where}: asks for {device_type} but its devshare allocation gives it none")
    ids: list[str] = []
    files: list[str] = []
    for g in grants:
        dev = next((d for d in inv.others if d.type == device_type and d.minor == g.minor), None)
        if dev is None or (g.id and g.id != dev.id):
            raise AllocateError(f"{where}: the allocation names {device_type} {g.id or g.minor}, not on this node")
        ids.append(dev.id)
        files.extend(p for p in dev.paths if p not in files)
    return ContainerDevices(envs={f"DEVSHARE_{device_type.upper()}_DEVICES": ",".join(ids)}, device_files=tuple(files))


def container_devices(pod: PendingPod, container: str, inv: Inventory, device_type: str) -> ContainerDevices:
    """What ``container`` of ``pod`` gets for the devices of ``device_type``."""
    if device_type == names.GPU:
        return gpu_devices(pod, container, inv)
    return other_devices(pod, container, inv, device_type)
