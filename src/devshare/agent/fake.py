"""A fake discovery backend: GPUs, links and other devices described in a YAML/JSON file.

Used by tests and demos. Any file of ``shared/topologies/`` is a valid description (``gpus`` as a
count, and ``links`` or ``bandwidth_gbps``); everything else is optional::

    node: node-1                  # the node name (the command line's --node wins)
    model: Tesla-V100-SXM2-16GB   # default GPU model (default: fake-gpu)
    vendor: nvidia                # the GPUs' vendor (default: nvidia)
    driverVersion: 535.104.05     # the GPU driver's version (default: none)
    memory: 16Gi                  # default memory per GPU (default: 16Gi)
    gpus: 8                       # a count, or a list of GPUs:
    #  - {minor: 0, uuid: GPU-..., model: ..., memory: 32Gi, pciBusId: "0000:3b:00.0", numa: 0, health: true}
    links: [...]                  # per pair: {a, b, nvlinks, pcie, via} (shared/topologies format);
                                  # a and b are positions in the GPU list (the minors when 0..n-1)
    bandwidth_gbps: [[...]]       # or a measured matrix (GB/s)
    unhealthy: [3]                # minors reported unhealthy
    processes:                    # what runs on the GPUs (NVML's running processes):
    - {gpu: 0, pid: 4242, memory: 6Gi, sm: 35}   # gpu: a minor or a UUID; memory and sm (percent) optional
    rdma: [{id: mlx5_0}]          # RDMA / FPGA devices (see devshare.agent.others)
    fpga: []

GPU UUIDs default to a stable value derived from the node name and the minor, so the same file
always describes the same cards. The file is read again on every discovery, so editing it (e.g.
adding a minor to ``unhealthy``) behaves like a health change on a real node.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import yaml

from devshare.agent.inventory import Gpu, GpuProcess, Inventory
from devshare.agent.others import parse_other_devices
from devshare.model.errors import InvalidDevice, InvalidInput, yaml_error
from devshare.model.links import parse_topology
from devshare.model.quantity import quantity_int

DEFAULT_MODEL = "fake-gpu"
DEFAULT_MEMORY = "16Gi"
DEFAULT_VENDOR = "nvidia"


def fake_uuid(node: str, minor: int) -> str:
    """A stable GPU UUID for a fake card."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"devshare-fake/{node}/{minor}"))


def _memory(value: Any, *, field: str) -> int:
    n = quantity_int(value, field=field)
    if n <= 0:
        raise InvalidDevice(f"memory must be positive, got {value!r}", field=field)
    return n


def parse_fake(data: Any, *, source: str, node: str) -> Inventory:
    """The inventory a fake description stands for."""
    if not isinstance(data, dict):
        raise InvalidDevice("a fake device file must be a mapping with gpus (a count or a list)", field=source)
    model = data.get("model", DEFAULT_MODEL)
    if not isinstance(model, str):
        raise InvalidDevice(f"model must be a string, got {model!r}", field=f"{source}: model")
    memory = _memory(data.get("memory", DEFAULT_MEMORY), field=f"{source}: memory")
    vendor, driver = data.get("vendor", DEFAULT_VENDOR), data.get("driverVersion", "")
    for key, value in (("vendor", vendor), ("driverVersion", driver)):
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise InvalidDevice(f"{key} must be a string, got {value!r}", field=f"{source}: {key}")
    unhealthy = data.get("unhealthy") or []
    if not isinstance(unhealthy, list) or not all(isinstance(m, int) for m in unhealthy):
        raise InvalidDevice("unhealthy must be a list of GPU minors", field=f"{source}: unhealthy")
    raw = data.get("gpus")
    if raw is None and "bandwidth_gbps" in data and isinstance(data["bandwidth_gbps"], list):
        raw = len(data["bandwidth_gbps"])
    gpus: list[Gpu] = []
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        items: list[Any] = [{"minor": i} for i in range(raw)]
    elif isinstance(raw, list):
        items = raw
    else:
        raise InvalidDevice("gpus must be a count (e.g. 8) or a list of GPUs", field=f"{source}: gpus")
    for i, item in enumerate(items):
        where = f"{source}: gpus[{i}]"
        if not isinstance(item, dict):
            raise InvalidDevice("each GPU must be a mapping (minor, uuid, model, memory, ...)", field=where)
        minor = item.get("minor", i)
        if isinstance(minor, bool) or not isinstance(minor, int) or minor < 0:
            raise InvalidDevice(f"minor must be an integer >= 0, got {minor!r}", field=where)
        if any(g.minor == minor for g in gpus):
            raise InvalidDevice(f"minor {minor} is listed twice", field=where)
        health = item.get("health", True)
        if not isinstance(health, bool):
            raise InvalidDevice(f"health must be true or false, got {health!r}", field=where)
        numa = item.get("numa", -1)
        if isinstance(numa, bool) or not isinstance(numa, int):
            raise InvalidDevice(f"numa must be an integer, got {numa!r}", field=where)
        gpus.append(
            Gpu(
                minor=minor,
                uuid=str(item.get("uuid") or item.get("id") or fake_uuid(node, minor)),
                model=str(item.get("model", model)),
                memory=_memory(item["memory"], field=f"{where}.memory") if "memory" in item else memory,
                pci_bus_id=str(item.get("pciBusId", "")),
                numa_node=numa,
                healthy=health and minor not in unhealthy,
            )
        )
    gpus.sort(key=lambda g: g.minor)
    links: tuple[Any, ...] = ()
    bandwidth = None
    if "links" in data or "bandwidth_gbps" in data:
        topo_data = {k: data[k] for k in ("links", "bandwidth_gbps") if k in data}
        topo_data["gpus"] = len(gpus)
        topo = parse_topology(topo_data, source=source)
        links = tuple(topo.links or ())
        if "bandwidth_gbps" in data:
            bandwidth = tuple(tuple(r) for r in topo.matrix)
    return Inventory(
        gpus=tuple(gpus), links=links, bandwidth=bandwidth, others=parse_other_devices(data, source=source),
        vendor=str(vendor) if gpus else "", driver_version=str(driver),
    )


def parse_processes(data: Any, inv: Inventory, *, source: str) -> list[GpuProcess]:
    """The ``processes`` of a fake description: per process its GPU (a minor or a UUID), its pid, and
    optionally the memory it holds (a quantity) and its SM utilization (percent)."""
    raw = data.get("processes") if isinstance(data, dict) else None
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidDevice("processes must be a list of {gpu, pid, memory, sm}", field=f"{source}: processes")
    out: list[GpuProcess] = []
    for i, item in enumerate(raw):
        where = f"{source}: processes[{i}]"
        if not isinstance(item, dict):
            raise InvalidDevice("each process must be a mapping with gpu and pid", field=where)
        ref = item.get("gpu")
        gpu = next((g for g in inv.gpus if (isinstance(ref, int) and not isinstance(ref, bool) and g.minor == ref)
                    or (isinstance(ref, str) and g.uuid == ref)), None)
        if gpu is None:
            raise InvalidDevice(f"gpu must be the minor or UUID of a GPU of the file, got {ref!r}", field=where)
        pid = item.get("pid")
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise InvalidDevice(f"pid must be a positive integer, got {pid!r}", field=where)
        memory = quantity_int(item["memory"], field=f"{where}.memory") if item.get("memory") is not None else None
        if memory is not None and memory < 0:
            raise InvalidDevice(f"memory must not be negative, got {item['memory']!r}", field=where)
        sm = item.get("sm")
        if sm is not None and (isinstance(sm, bool) or not isinstance(sm, int | float) or not 0 <= sm <= 100):
            raise InvalidDevice(f"sm must be a percent (0 to 100), got {sm!r}", field=where)
        out.append(GpuProcess(uuid=gpu.uuid, pid=pid, memory=memory, sm=float(sm) if sm is not None else None))
    return out


def read_description(path: Path) -> Any:
    """The content of a fake description file (JSON or YAML)."""
    text = path.read_text()
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise InvalidInput(f"not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})",
                               field=str(path)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise yaml_error(e, path) from None


class FakeBackend:
    """Discovery from a description file, read again on every call."""

    def __init__(self, path: str | Path, *, node: str = "") -> None:
        self.path = Path(path)
        data = read_description(self.path)
        self.node = node or (data.get("node") if isinstance(data, dict) and data.get("node") else "") or (
            "fake-node"
        )
        parse_processes(data, parse_fake(data, source=str(self.path), node=self.node),
                        source=str(self.path))  # fail early on a bad file

    def discover(self) -> Inventory:
        return parse_fake(read_description(self.path), source=str(self.path), node=self.node)

    def processes(self) -> list[GpuProcess]:
        data = read_description(self.path)
        return parse_processes(data, parse_fake(data, source=str(self.path), node=self.node), source=str(self.path))

    def close(self) -> None:
        return None
