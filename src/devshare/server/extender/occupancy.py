"""Who holds what, and what is stranded: the data of the ``/ui`` page and of the stranded-GPU metrics.

Built from a copy of the state (``ClusterState.view()``: its inspect JSON, device columns, the pods'
allocations and the per-card container limit), so the engine can change its arrays without touching
this, and the extender builds it in a thread while the state goes on changing.

**Stranded** compute is free compute on a healthy card that no further share can use: the card has
less than seed 000's ``MinGPUMemory`` (256 MiB) free, or already holds the most containers a card
may (``maxContainersPerCard``). Every GPU share needs memory (Koordinator's ``gpu-core`` needs a
memory dimension, mGPU shares need 256 MiB), and a whole-card ask needs an empty card, so that
compute waits until a holder leaves. Free memory beside no free compute is not counted: a
memory-only ask (Aliyun ``gpu-mem``) can still use it. RDMA and FPGA (no memory) strand their free
share only at the container limit. Unhealthy cards and cards held by another device plugin are
``unavailable``, not stranded. ``strandedGpus`` is the stranded compute in whole GPUs (100% = 1).

**Used** is what the card's processes really hold, as the node agent last wrote it in the Device's
``status.usage`` (:mod:`devshare.model.usage`): per card ``usage`` (``memoryUsed`` bytes,
``utilization`` 0..1 or null, ``at``), per holder ``memoryUsed`` and ``utilization``, and the
processes of the card that belong to no holder (another scheduler's pod, a process outside any
container: ``unknown/unknown``) under ``usage.others``. A card whose node reports no usage has none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from devshare.engine.stateview import DeviceColumns, StateView, inspect_view
from devshare.model import names
from devshare.model.dialects import mgpu
from devshare.model.usage import GpuUse, NodeUsage

MIN_MEMORY = mgpu.MIN_GPU_MEMORY


def stranded_core(cols: DeviceColumns, max_containers: int) -> npt.NDArray[np.float64]:
    """Percent of compute stranded on each device of ``cols`` (see the module doc): one array
    expression, so every device of a large cluster costs a few numpy calls, not a Python loop."""
    free = cols.total_core - cols.used_core
    held = cols.containers > 0
    cond = cols.containers >= max_containers
    if cols.memory:
        cond = cond | (cols.total_mem - cols.used_mem < MIN_MEMORY)
    stranded = cols.healthy & ~cols.held_outside & (free > 0) & held & cond
    return np.where(stranded, free, 0) / 10


def _with_usage(device: dict[str, Any], use: GpuUse | None, at: str) -> dict[str, Any]:
    """``device`` with what its processes really use (the module doc), when its node reports it."""
    if use is None:
        return device
    by_holder = {(c.pod, c.container): c for c in use.containers}
    for h in device["holders"]:
        c = by_holder.pop((h["pod"], h["container"]), None)
        h["memoryUsed"] = c.memory_used if c is not None else 0
        h["utilization"] = c.utilization if c is not None else None
    device["usage"] = {"at": at, "memoryUsed": use.memory_used, "utilization": use.utilization,
                       "others": [{"pod": c.pod, "container": c.container, "memoryUsed": c.memory_used,
                                   "utilization": c.utilization} for c in by_holder.values()]}
    return device


def occupancy(view: StateView, usage: Mapping[str, NodeUsage] | None = None, *,
              inspected: dict[str, Any] | None = None, pause: Callable[[], None] | None = None) -> dict[str, Any]:
    """``{"nodes": [...], "totals": {...}, "maxContainersPerCard": N}``: per node, per device, its
    capacity, use, free and stranded share, and each holder (``ns/pod/container``) with its share;
    with ``usage`` (node -> what its agent reported), what is really used beside what is allocated.
    ``inspected``: :func:`inspect_view` of ``view``, made already (not changed here); ``pause``: called
    every few dozen nodes (see :func:`inspect_view`)."""
    usage = usage or {}
    if inspected is None:
        inspected = inspect_view(view, pause)
    holders: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for n, (key, alloc, phase) in enumerate(view.pods):
        if pause is not None and not n % 256:
            pause()
        for ci, g in alloc.grants():
            holders.setdefault((alloc.node, g.type, g.minor), []).append({
                "pod": key, "container": alloc.containers[ci].name, "phase": phase,
                "core": g.core_milli / 10, "memory": g.memory,
            })
    limit = view.max_containers
    stranded_of = {(node, cols.type, minor): pct for cols in view.columns
                   for node, minor, pct in zip(cols.node, cols.minor.tolist(), stranded_core(cols, limit).tolist(),
                                               strict=True)}
    totals = {"nodes": 0, "gpus": 0, "gpusUsed": 0.0, "gpusIdle": 0, "strandedGpus": 0.0, "unavailable": 0}
    nodes = []
    for i, node in enumerate(inspected["nodes"]):
        if pause is not None and not i % 32:
            pause()
        node_stranded = 0.0
        reported = usage.get(node["name"])
        gpu_use = {g.minor: g for g in reported.gpus} if reported is not None else {}
        devices = []
        for d in node["devices"]:
            stranded = stranded_of[(node["name"], d["type"], d["minor"])]
            used_core = float(d["used"]["core"])
            available = bool(d["health"]) and not d.get("heldOutside")
            if d["type"] == names.GPU:
                totals["gpus"] += 1
                totals["gpusUsed"] += used_core / 100
                totals["gpusIdle"] += int(available and not d["used"].get("containers"))
                totals["unavailable"] += int(not available)
                node_stranded += stranded
            devices.append(_with_usage({
                **{k: d[k] for k in ("type", "minor", "id", "health", "heldOutside", "total", "used")},
                "available": available,
                "free": {"core": float(d["total"]["core"]) - used_core,
                         **({"memory": int(d["total"]["memory"]) - int(d["used"].get("memory", 0))}
                            if "memory" in d["total"] else {})},
                "stranded": {"core": stranded},
                "holders": sorted(holders.get((node["name"], d["type"], d["minor"]), []),
                                  key=lambda h: (h["pod"], h["container"])),
            }, gpu_use.get(d["minor"]) if d["type"] == names.GPU else None, reported.at if reported else ""))
        totals["nodes"] += 1
        totals["strandedGpus"] += node_stranded / 100
        nodes.append({"name": node["name"], "strandedGpus": node_stranded / 100, "devices": devices})
    totals["gpusUsed"] = round(totals["gpusUsed"], 4)
    totals["strandedGpus"] = round(totals["strandedGpus"], 4)
    return {"nodes": nodes, "totals": totals, "maxContainersPerCard": limit}
