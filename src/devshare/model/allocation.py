"""The allocation: which devices each container of a pod got, and how much of each."""

from __future__ import annotations

import msgspec


class DeviceGrant(msgspec.Struct, frozen=True, kw_only=True):
    """A share of one device given to one container."""

    type: str
    minor: int
    id: str = ""
    core_milli: int = 0  # thousandths of the device's compute (RDMA/FPGA: share)
    memory: int = 0  # bytes (GPUs)
    memory_ratio_milli: int = 0  # memory as thousandths of the device's memory (GPUs)


class ContainerAllocation(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    devices: tuple[DeviceGrant, ...] = ()


class PodAllocation(msgspec.Struct, frozen=True, kw_only=True):
    """Where a pod was placed and what each container got. The canonical annotation's content."""

    node: str
    containers: tuple[ContainerAllocation, ...] = ()

    def grants(self) -> list[tuple[int, DeviceGrant]]:
        """(container index, grant) for every grant of the pod."""
        return [(i, g) for i, c in enumerate(self.containers) for g in c.devices]

    def minors(self, device_type: str) -> list[int]:
        """Distinct minors of ``device_type`` used by the pod, in first-use order."""
        out: list[int] = []
        for _, g in self.grants():
            if g.type == device_type and g.minor not in out:
                out.append(g.minor)
        return out
