"""NVIDIA's device plugin name, ``nvidia.com/gpu: N``: N whole GPUs (seed 001 translates it to
gpu-core and gpu-memory-ratio of 100 each per GPU). Zero means "not asked".

Its pods carry Koordinator's ``device-allocated`` annotation (seed 001's translation), and a pod
asking ``nvidia.com/gpu`` beside Koordinator's ``rdma``/``fpga`` is of the Koordinator dialect.
"""

from __future__ import annotations

from typing import Any

from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.dialects import koordinator_annotation
from devshare.model.dialects.base import Dialect, PlacedReading, read_whole, spec_containers, whole_quantity
from devshare.model.problems import Problems
from devshare.model.request import WHOLE, DeviceRequest, PodRequest

NVIDIA_GPU = "nvidia.com/gpu"
NAMES = frozenset({NVIDIA_GPU})


def whole_devices(name: str, value: int) -> str | None:
    """A count of whole devices: zero or more."""
    if value < 0:
        return f"{name} is {value}; it must be a number of whole GPUs, 1 or more"
    return None


def read_container(resources: dict[str, Any], where: str, problems: Problems) -> list[DeviceRequest]:
    n = read_whole(resources, NVIDIA_GPU, where, problems, "GPUs")
    if n is None:
        return []
    msg = whole_devices(NVIDIA_GPU, n)
    if msg:
        problems.add(where, msg)
        return []
    if n == 0:
        return []
    return [DeviceRequest(type=names.GPU, count=n, core_milli=WHOLE, memory_ratio_milli=WHOLE)]


def read_placed(annotations: dict[str, str], spec: Any) -> PlacedReading | None:
    """A pod asking ``nvidia.com/gpu`` that no scheduler recorded cards for: kube-scheduler counted it
    and NVIDIA's device plugin (through kubelet) picked its cards, which only kubelet's checkpoint
    knows. Counted through the node's Device when its agent reports them there (seed 001's
    ``devices-checkpoints``, by pod UID); otherwise every GPU of its node counts as held while it runs
    (docs/migrate.md, "Plain NVIDIA")."""
    init, app = spec_containers(spec)
    if not any(whole_quantity(res.get(NVIDIA_GPU)) for _, res in init + app):
        return None
    return PlacedReading(dialect="nvidia-plugin", unreadable=(names.GPU,), in_checkpoint=True, problems=(
        "asks for nvidia.com/gpu with no scheduler's record of its cards (kube-scheduler and NVIDIA's device "
        "plugin placed it): every GPU of the node counts as held until the node's kubelet checkpoint, reported "
        "in its Device, names them",))


class NvidiaDialect(Dialect):
    name = "nvidia"
    resource_names = NAMES
    managed_resources = (NVIDIA_GPU,)

    def read(self, resources: dict[str, Any], where: str, problems: Problems, context: Any,
             index: int) -> list[DeviceRequest]:
        return read_container(resources, where, problems)

    def encode(self, pod: PodRequest, alloc: PodAllocation, *, now_ns: int,
               device_memory: dict[int, int] | None) -> dict[str, str]:
        return koordinator_annotation.encode_koordinator(alloc) if alloc.grants() else {}

    def read_placed(self, annotations: dict[str, str], spec: dict[str, Any]) -> PlacedReading | None:
        return read_placed(annotations, spec)
