"""The one internal request type every dialect is parsed into.

Units, everywhere in devshare:

- ``core_milli``: thousandths of one device's compute (1000 = a whole device). For RDMA and FPGA
  it is the share of the device. Koordinator's ``gpu-core: 50`` is 500.
- ``memory``: bytes of device memory per device.
- ``memory_ratio_milli``: thousandths of one device's memory (1000 = all of it); turned into bytes
  once the device is known (allocatedMemory = total memory of that device x ratio, seed 001).
"""

from __future__ import annotations

import msgspec

WHOLE = 1000  # core_milli / memory_ratio_milli of one whole device
WHOLE_PERCENT = 100  # the same in percent, as the dialects write it (Koordinator's gpu-core: 100, mgpu-core: 100)
# Sane maximums of what one container may ask: above them a value is a typo or an attack, refused at
# parse time rather than ending as a MemoryError or an OverflowError in the engine's int64 arrays.
MAX_DEVICES = 1024  # devices of one type
MAX_DEVICE_MEMORY = 2**50  # bytes of device memory (1 PiB)
MAX_CPU_MILLI = 2**16 * 1000  # cpu (65,536 cores)
MAX_MEMORY = 2**46  # bytes of host memory (64 TiB)


class DeviceRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What one container asks of one device type: ``count`` devices, each with this much."""

    type: str  # "gpu" | "rdma" | "fpga" | any registered device type
    count: int = 1
    core_milli: int = 0
    memory: int = 0  # bytes per device; 0 = not asked in bytes
    memory_ratio_milli: int = 0  # per device; 0 = not asked as a ratio

    @property
    def whole(self) -> bool:
        """True when each device is taken whole (exclusive)."""
        return self.core_milli >= WHOLE and (self.memory_ratio_milli >= WHOLE or self.memory == 0)

    def memory_on(self, total_memory: int) -> int:
        """Bytes asked on a device with ``total_memory`` bytes."""
        if self.memory_ratio_milli:
            return total_memory * self.memory_ratio_milli // WHOLE
        return self.memory


class ContainerRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One container's device requests, one entry per device type (empty: asks for none)."""

    name: str
    devices: tuple[DeviceRequest, ...] = ()
    # an init container with restartPolicy Always (a "sidecar"): it runs beside the app containers, and
    # kubelet keeps its devices for it rather than handing them on (only in PodRequest.init_containers)
    restartable: bool = False

    def get(self, device_type: str) -> DeviceRequest | None:
        for d in self.devices:
            if d.type == device_type:
                return d
        return None


class GpuSelection(msgspec.Struct, frozen=True, kw_only=True):
    """Which GPUs a pod may take, from its annotations (HAMi's ``nvidia.com/use-gpuuuid``,
    ``nouse-gpuuuid``, ``use-gputype``, ``nouse-gputype``): an id must be one of ``use_ids`` (when
    given) and none of ``avoid_ids`` (exact); a type (the card's model) must contain one of
    ``use_types`` (when given) and none of ``avoid_types`` (case-insensitive substrings: ``A100``
    matches ``NVIDIA A100-SXM4-80GB``)."""

    use_ids: tuple[str, ...] = ()
    avoid_ids: tuple[str, ...] = ()
    use_types: tuple[str, ...] = ()
    avoid_types: tuple[str, ...] = ()

    def why_not(self, device_id: str, model: str) -> str | None:
        """Why the GPU ``device_id`` of model ``model`` is not allowed (None when it is)."""
        if self.use_ids and device_id not in self.use_ids:
            return "not one of its nvidia.com/use-gpuuuid"
        if device_id and device_id in self.avoid_ids:
            return "listed in its nvidia.com/nouse-gpuuuid"
        upper = model.upper()
        if self.use_types and not any(t.upper() in upper for t in self.use_types):
            return f"of type {model or 'unknown'}, not one of its nvidia.com/use-gputype"
        if model and any(t.upper() in upper for t in self.avoid_types):
            return f"of type {model}, listed in its nvidia.com/nouse-gputype"
        return None

    def allows(self, device_id: str, model: str) -> bool:
        return self.why_not(device_id, model) is None

    def describe(self) -> str:
        """The annotations, for messages: ``nvidia.com/use-gputype: A100; nvidia.com/nouse-gpuuuid: GPU-1``."""
        lists = (("nvidia.com/use-gpuuuid", self.use_ids), ("nvidia.com/nouse-gpuuuid", self.avoid_ids),
                 ("nvidia.com/use-gputype", self.use_types), ("nvidia.com/nouse-gputype", self.avoid_types))
        parts = [(k, v) for k, v in lists if v]
        return "; ".join(f"{k}: {','.join(v)}" for k, v in parts)


class GroupRef(msgspec.Struct, frozen=True, kw_only=True):
    """Seed 003 group membership (labels) and gang (annotations) of a pod."""

    name: str
    replicas: int
    gang_name: str | None = None
    min_available: int | None = None


class PodRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A pod as the engine sees it: who it is and what every container asks for."""

    namespace: str
    name: str
    uid: str = ""
    containers: tuple[ContainerRequest, ...] = ()
    # every init container, in spec order (those asking for nothing too: some dialects' annotations
    # list them); how their devices are placed: devshare.model.initplan
    init_containers: tuple[ContainerRequest, ...] = ()
    dialect: str = "koordinator"  # the dialect it asked in: koordinator | nvidia | mgpu | aliyun
    compute_policy: str | None = None  # mGPU compute policy asked by annotation, if any
    gpu_models: tuple[str, ...] = ()  # allowed GPU models; empty = any
    gpu_selection: GpuSelection | None = None  # the GPUs it may take, by id or type (HAMi's annotations)
    cpu_milli: int = 0  # node CPU asked (used when the state tracks node CPU, e.g. the simulator)
    memory_bytes: int = 0  # node memory asked, likewise
    priority: int = 0
    preempts: bool = True  # may evict lower-priority pods (spec.preemptionPolicy is not Never)
    group: GroupRef | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def device_types(self) -> tuple[str, ...]:
        seen: list[str] = []
        for c in (*self.containers, *self.init_containers):
            for d in c.devices:
                if d.type not in seen:
                    seen.append(d.type)
        return tuple(seen)

    def needs(self, device_type: str) -> list[tuple[int, DeviceRequest]]:
        """(container index, request) for every container asking for ``device_type``."""
        return [(i, d) for i, c in enumerate(self.containers) for d in c.devices if d.type == device_type]

    def has_devices(self) -> bool:
        return any(c.devices for c in self.containers) or any(c.devices for c in self.init_containers)

    def multi_card_share(self) -> bool:
        """True when some container spreads a fractional share over several GPUs (seed 000)."""
        return any(
            d.type == "gpu" and d.count > 1 and not d.whole
            for c in (*self.containers, *self.init_containers) for d in c.devices
        )
