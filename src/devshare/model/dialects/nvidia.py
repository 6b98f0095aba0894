"""``nvidia.com/gpu: N``: N whole GPUs (seed 001 translates it to gpu-core and gpu-memory-ratio
of 100 each per GPU). Zero means "not asked"."""

from __future__ import annotations

from typing import Any

from devshare.model import names, validation
from devshare.model.dialects.problems import Problems, read_whole
from devshare.model.request import WHOLE, DeviceRequest

NAMES = frozenset({names.NVIDIA_GPU})


def parse(resources: dict[str, Any], where: str, problems: Problems) -> list[DeviceRequest]:
    n = read_whole(resources, names.NVIDIA_GPU, where, problems, "GPUs")
    if n is None:
        return []
    msg = validation.whole_devices(names.NVIDIA_GPU, n)
    if msg:
        problems.add(where, msg)
        return []
    if n == 0:
        return []
    return [DeviceRequest(type=names.GPU, count=n, core_milli=WHOLE, memory_ratio_milli=WHOLE)]
