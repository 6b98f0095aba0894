"""The extended resources a node advertises, in every dialect, and how each is advertised.

Two ways to make kubelet admit a pod asking for an extended resource:

- **device plugin**: the agent serves the name over the device plugin API as N fake device ids
  (N = the node's capacity in that resource's unit, each id tied to one physical device so that
  a sick card's ids turn unhealthy). Kubelet then calls ``Allocate`` for every container asking
  for it: that call is where a container gets its devices. Names that count devices or percents
  (at most 100 per card) are served this way.
- **node status**: the agent patches ``status.capacity`` / ``status.allocatable`` of the Node.
  Used for byte-sized names (``koordinator.sh/gpu-memory`` would be billions of ids) and for a
  name whose id list would not fit in one ListAndWatch message (kubelet's gRPC client accepts
  4 MiB, about 190 000 ids), e.g. ``aliyun.com/gpu-mem`` in MiB on a node with more than
  ~180 GiB of GPU memory.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from devshare.agent.inventory import Gpu, Inventory, OtherDevice
from devshare.model import names
from devshare.model.dialects import aliyun, koordinator_names, mgpu, nvidia
from devshare.model.quantity import MIB

MAX_LIST_BYTES = 4 * 1024 * 1024 - 64 * 1024  # kubelet's gRPC receive limit, with a margin


class PluginResource(msgspec.Struct, frozen=True, kw_only=True):
    """A resource served through the device plugin API."""

    name: str
    device_type: str  # gpu | rdma | fpga
    per_device: str  # "one" (the device id itself), "percent" (100 ids), "mib" (one id per MiB)
    short: str  # a short tag for fake ids and the socket file name

    def units(self, memory: int) -> int:
        if self.per_device == "one":
            return 1
        if self.per_device == "percent":
            return 100
        return memory // MIB

    def socket_name(self) -> str:
        return f"devshare-{self.short}.sock"


PLUGIN_RESOURCES: tuple[PluginResource, ...] = (
    PluginResource(name=nvidia.NVIDIA_GPU, device_type=names.GPU, per_device="one", short="nvidia-gpu"),
    PluginResource(name=koordinator_names.KOORD_GPU, device_type=names.GPU, per_device="percent", short="koord-gpu"),
    PluginResource(name=koordinator_names.KOORD_GPU_CORE, device_type=names.GPU, per_device="percent",
                   short="koord-core"),
    PluginResource(
        name=koordinator_names.KOORD_GPU_MEMORY_RATIO, device_type=names.GPU, per_device="percent", short="koord-ratio"
    ),
    PluginResource(name=mgpu.MGPU_CORE, device_type=names.GPU, per_device="percent", short="mgpu-core"),
    PluginResource(name=aliyun.ALIYUN_GPU_COUNT, device_type=names.GPU, per_device="one", short="aliyun-count"),
    PluginResource(name=aliyun.ALIYUN_GPU_MEM, device_type=names.GPU, per_device="mib", short="aliyun-mem"),
    PluginResource(name=koordinator_names.KOORD_RDMA, device_type=names.RDMA, per_device="percent", short="koord-rdma"),
    PluginResource(name=koordinator_names.KOORD_FPGA, device_type=names.FPGA, per_device="percent", short="koord-fpga"),
)

# names always advertised through the node status: name -> bytes per unit (of the GPUs' memory)
STATUS_RESOURCES: dict[str, int] = {
    koordinator_names.KOORD_GPU_MEMORY: 1,
    mgpu.MGPU_MEMORY: MIB,
}


class FakeDevice(msgspec.Struct, frozen=True, kw_only=True):
    """One id a device plugin lists, and the physical device it stands for."""

    id: str
    device_id: str
    healthy: bool
    numa_node: int = -1


def _devices(resource: PluginResource, inv: Inventory) -> list[Gpu | OtherDevice]:
    if resource.device_type == names.GPU:
        return list(inv.gpus)
    return [d for d in inv.others if d.type == resource.device_type]


def fake_devices(resource: PluginResource, inv: Inventory) -> list[FakeDevice]:
    """The ids the plugin for ``resource`` lists: per device, one id per unit."""
    out: list[FakeDevice] = []
    for d in _devices(resource, inv):
        dev_id = d.uuid if isinstance(d, Gpu) else d.id
        numa = d.numa_node if isinstance(d, Gpu) else -1
        n = resource.units(d.memory if isinstance(d, Gpu) else 0)
        if resource.per_device == "one":
            out.append(FakeDevice(id=dev_id, device_id=dev_id, healthy=d.healthy, numa_node=numa))
            continue
        tag = f"{d.minor}" if isinstance(d, Gpu) else f"{d.type}{d.minor}"
        out.extend(
            FakeDevice(id=f"{tag}-{k}", device_id=dev_id, healthy=d.healthy, numa_node=numa) for k in range(n)
        )
    return out


def owners(resource: PluginResource, inv: Inventory) -> Callable[[str], str]:
    """id -> the physical device's id, for the ids :func:`fake_devices` lists (without building them:
    ``aliyun.com/gpu-mem`` lists one id per MiB); "" for an id it does not list."""
    if resource.per_device == "one":
        known = {d.uuid if isinstance(d, Gpu) else d.id for d in _devices(resource, inv)}
        return lambda i: i if i in known else ""
    tags = {(f"{d.minor}" if isinstance(d, Gpu) else f"{d.type}{d.minor}"): d.uuid if isinstance(d, Gpu) else d.id
            for d in _devices(resource, inv)}
    return lambda i: tags.get(i.rsplit("-", 1)[0], "")


def fake_count(resource: PluginResource, inv: Inventory) -> int:
    """How many ids the plugin for ``resource`` lists."""
    return sum(resource.units(d.memory if isinstance(d, Gpu) else 0) for d in _devices(resource, inv))


def _capacity(total: int, unit: int) -> str:
    return str(total // unit)


def status_resources(inv: Inventory, *, extra: tuple[str, ...] = ()) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) of the names advertised through the node status.

    ``extra`` are plugin resource names that fell back to the node status (too many ids).
    Capacity counts every device, allocatable the healthy ones (as kubelet does for plugins).
    """
    capacity: dict[str, str] = {}
    allocatable: dict[str, str] = {}
    gpus = inv.gpus
    for name, unit in STATUS_RESOURCES.items():
        capacity[name] = _capacity(sum(g.memory for g in gpus), unit)
        allocatable[name] = _capacity(sum(g.memory for g in gpus if g.healthy), unit)
    for name in extra:
        res = resource_named(name)
        if res is None:
            continue
        devs = _devices(res, inv)
        capacity[name] = str(sum(res.units(getattr(d, "memory", 0)) for d in devs))
        allocatable[name] = str(sum(res.units(getattr(d, "memory", 0)) for d in devs if d.healthy))
    return capacity, allocatable


def resource_named(name: str) -> PluginResource | None:
    return next((r for r in PLUGIN_RESOURCES if r.name == name), None)
