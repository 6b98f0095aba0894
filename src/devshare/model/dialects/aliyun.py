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
"""

from __future__ import annotations

from typing import Any

from devshare.model import names, validation
from devshare.model.dialects.problems import Problems, read_whole
from devshare.model.quantity import MIB
from devshare.model.request import WHOLE, DeviceRequest

NAMES = frozenset({names.ALIYUN_GPU_MEM, names.ALIYUN_GPU_COUNT})


def parse(resources: dict[str, Any], where: str, problems: Problems) -> list[DeviceRequest]:
    mem = read_whole(resources, names.ALIYUN_GPU_MEM, where, problems, "MiB")
    count = read_whole(resources, names.ALIYUN_GPU_COUNT, where, problems, "GPUs")
    msgs = [
        validation.aliyun_gpu_mem(mem) if mem is not None else None,
        validation.aliyun_gpu_count(count) if count is not None else None,
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
