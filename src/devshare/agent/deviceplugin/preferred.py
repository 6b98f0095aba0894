"""Which device ids kubelet should pick for a container (``GetPreferredAllocation``).

kubelet picks the ids of an Allocate call itself, from the ids a plugin lists, and records them in
its checkpoint and serves them on its pod-resources API (which monitoring such as dcgm-exporter
reads to tell which pod holds which card). The ids devshare lists are tied to physical devices
(:mod:`devshare.agent.resources`), so when kubelet picks them at random the record names cards the
container does not get. kubelet asks the plugin first when the plugin says it can; the answer is
the ids of the devices the container's allocation names, per device as many as the container's
share of it in the resource's unit:

- ``one`` id per device (``nvidia.com/gpu``, ``aliyun.com/gpu-count``): one per granted device;
- ``percent`` (100 per device): the grant's percent in the resource's dimension (memory ratio for
  ``koordinator.sh/gpu-memory-ratio``, compute otherwise; an RDMA/FPGA share);
- ``mib`` (``aliyun.com/gpu-mem``): the grant's MiB.

When these do not add up to the size kubelet asks for (an ask the allocation does not mirror
exactly), the size is split over the granted devices in proportion; ids kubelet must include (the
ones an init container held, which kubelet reuses) count toward their device, and whatever is still
missing is taken from any available id. kubelet keeps only ids it offered, so the answer never
names another.
"""

from __future__ import annotations

from collections.abc import Sequence

from devshare.agent.envs import memory_limit
from devshare.agent.inventory import Inventory
from devshare.agent.resources import PluginResource, owners
from devshare.model import names
from devshare.model.allocation import DeviceGrant
from devshare.model.dialects.koordinator_names import KOORD_GPU_MEMORY_RATIO
from devshare.model.quantity import MIB
from devshare.model.request import WHOLE


def _device_id(g: DeviceGrant, inv: Inventory) -> str:
    if g.type == names.GPU:
        gpu = inv.gpu_by_minor(g.minor)
        return gpu.uuid if gpu is not None else ""
    dev = next((d for d in inv.others if d.type == g.type and d.minor == g.minor), None)
    return dev.id if dev is not None else ""


def _units(resource: PluginResource, g: DeviceGrant, inv: Inventory) -> int:
    """The grant in the resource's unit (module doc)."""
    if resource.per_device == "one":
        return 1
    if resource.per_device == "mib":
        return memory_limit(g, inv) // MIB
    if resource.name == KOORD_GPU_MEMORY_RATIO:
        gpu = inv.gpu_by_minor(g.minor)
        if g.memory_ratio_milli:
            return g.memory_ratio_milli * 100 // WHOLE
        if g.memory and gpu is not None and gpu.memory:
            return g.memory * 100 // gpu.memory
    return g.core_milli * 100 // WHOLE


def _split(size: int, weights: list[int]) -> list[int]:
    """``size`` over the weights, in proportion (largest remainders get the rest)."""
    if not weights:
        return []
    if sum(weights) == size:
        return list(weights)
    total = sum(weights) or len(weights)
    ws = weights if sum(weights) else [1] * len(weights)
    counts = [size * w // total for w in ws]
    rest = sorted(range(len(ws)), key=lambda i: -(size * ws[i] % total))
    for i in rest[: size - sum(counts)]:
        counts[i] += 1
    return counts


def preferred_ids(resource: PluginResource, inv: Inventory, grants: Sequence[DeviceGrant],
                  available: Sequence[str], must_include: Sequence[str], size: int) -> list[str]:
    """The ``size`` ids to pick for a container holding ``grants`` (module doc); with no grant, the
    ids kubelet must include and then the first available."""
    chosen = list(dict.fromkeys(must_include))[:size]
    taken = set(chosen)
    if grants:
        owner = owners(resource, inv)
        quota: dict[str, int] = {}
        for g, n in zip(grants, _split(size, [_units(resource, g, inv) for g in grants]), strict=True):
            dev = _device_id(g, inv)
            quota[dev] = quota.get(dev, 0) + n
        for i in chosen:
            dev = owner(i)
            if dev in quota:
                quota[dev] -= 1
        for i in available:
            if len(chosen) >= size:
                break
            dev = owner(i)
            if i not in taken and quota.get(dev, 0) > 0:
                chosen.append(i)
                taken.add(i)
                quota[dev] -= 1
    for i in available:
        if len(chosen) >= size:
            break
        if i not in taken:
            chosen.append(i)
            taken.add(i)
    return chosen
