"""Koordinator's resource names: the current ``koordinator.sh/`` ones and the seed's older
``kubernetes.io/`` ones, and the annotation's name."""

from __future__ import annotations

from devshare.model import names

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
