"""What discovery found on a node: GPUs, the links between them, and other devices."""

from __future__ import annotations

from typing import Protocol

import msgspec

from devshare.model.links import Link


class Gpu(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU as discovery sees it."""

    minor: int
    uuid: str
    model: str = ""
    memory: int = 0  # bytes
    pci_bus_id: str = ""
    numa_node: int = -1  # -1: unknown
    healthy: bool = True


class OtherDevice(msgspec.Struct, frozen=True, kw_only=True):
    """An RDMA or FPGA device, from the agent's configuration file."""

    type: str  # "rdma" | "fpga"
    minor: int
    id: str
    healthy: bool = True
    paths: tuple[str, ...] = ()  # device files handed to the container (e.g. /dev/infiniband/uverbs0)


class Inventory(msgspec.Struct, frozen=True, kw_only=True):
    """Everything discovered on a node at one moment."""

    gpus: tuple[Gpu, ...] = ()
    # interconnect per GPU pair, by position in `gpus` (NVLink count, PCIe common-ancestor level)
    links: tuple[Link, ...] = ()
    # bandwidth matrix (GB/s) in the order of `gpus`; None: none known (computed from links later)
    bandwidth: tuple[tuple[float, ...], ...] | None = None
    others: tuple[OtherDevice, ...] = ()
    vendor: str = ""  # the GPUs' vendor ("nvidia" from NVML); "" when there are none
    driver_version: str = ""  # the GPU driver's version (NVML's system driver version), "" when unknown

    def gpu_by_minor(self, minor: int) -> Gpu | None:
        for g in self.gpus:
            if g.minor == minor:
                return g
        return None


class GpuProcess(msgspec.Struct, frozen=True, kw_only=True):
    """A process running on a GPU, as the driver reports it (NVML's running processes)."""

    uuid: str  # the GPU's
    pid: int  # in the host's PID namespace
    memory: int | None = None  # bytes of the GPU's memory it holds; None: the driver does not say
    sm: float | None = None  # percent of the GPU's SMs it kept busy lately; None: no utilization samples


class Backend(Protocol):
    """A source of device inventories (NVML, or a fake description)."""

    def discover(self) -> Inventory:
        """Everything present now (GPU health included)."""
        ...

    def processes(self) -> list[GpuProcess]:
        """The processes running on the GPUs now, with their memory and utilization."""
        ...

    def close(self) -> None: ...

