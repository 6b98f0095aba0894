"""The Device resource (``devshare.io/v1alpha1``, kind ``Device``; seeds 001 and 003).

One Device object per node, named after the node, lists the node's devices and the GPU bandwidth
matrix. :func:`parse_device` turns the object (a plain dict, as read from the API or YAML) into
:class:`NodeDevices`; :func:`device_object` writes one back.
"""

from __future__ import annotations

import json
import math
from typing import Any

import msgspec

from devshare.model import names
from devshare.model.errors import InvalidDevice, InvalidInput
from devshare.model.quantity import format_bytes, quantity_int
from devshare.model.request import WHOLE


class DeviceInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One device of a node, parsed."""

    type: str
    minor: int
    id: str = ""
    health: bool = True
    core_milli: int = WHOLE  # total compute (or share, for RDMA/FPGA) in thousandths
    memory: int = 0  # total memory in bytes (GPUs)
    model: str = ""  # GPU model, when known


class NodeDevices(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a node's Device object says, parsed."""

    node: str
    devices: tuple[DeviceInfo, ...] = ()
    # GPU bandwidth matrix in GB/s, row i column j, indexed like the GPUs' minors order in `devices`
    gpu_bandwidth: tuple[tuple[float, ...], ...] | None = None
    # device ids held outside devshare (kubelet checkpoint of another device plugin, seed 001)
    held_outside: tuple[str, ...] = ()
    # the pods (UIDs) those checkpoint entries name: their cards are counted through held_outside
    held_pods: tuple[str, ...] = ()
    gpu_model: str = ""  # the Device's devshare.io/gpu-model label (the agent's, as on the Node)

    def of_type(self, device_type: str) -> tuple[DeviceInfo, ...]:
        return tuple(d for d in self.devices if d.type == device_type)


def _first(resources: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for k in keys:
        if k in resources:
            return resources[k]
    return None


def parse_topology_matrix(text: str | list[Any], *, field: str, size: int | None = None) -> tuple[
    tuple[float, ...], ...
]:
    """Parse a bandwidth matrix given as a JSON string or a list of lists (square, finite, >= 0)."""
    try:
        rows = json.loads(text) if isinstance(text, str) else text
    except json.JSONDecodeError as e:
        raise InvalidDevice(f"bandwidth topology is not valid JSON ({e.msg} at {e.pos})", field=field) from e
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise InvalidDevice("bandwidth topology must be a list of rows, e.g. [[750,48],[48,750]]", field=field)
    n = len(rows)
    out: list[tuple[float, ...]] = []
    for i, r in enumerate(rows):
        if len(r) != n:
            raise InvalidDevice(f"bandwidth topology must be square: row {i} has {len(r)} of {n}", field=field)
        row: list[float] = []
        for j, v in enumerate(r):
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
                raise InvalidDevice(f"bandwidth [{i}][{j}] must be a number >= 0, got {v!r}", field=field)
            row.append(float(v))
        out.append(tuple(row))
    if size is not None and n != size:
        raise InvalidDevice(f"bandwidth topology is {n}x{n} but the node has {size} GPUs", field=field)
    return tuple(out)


def parse_device(obj: Any) -> NodeDevices:
    """Parse a Device object (dict). Raises :class:`InvalidDevice` naming the bad field."""
    if not isinstance(obj, dict):
        raise InvalidDevice("a Device must be a mapping with metadata and spec")
    meta = obj.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise InvalidDevice("metadata.name (the node's name) is missing", field="metadata.name")
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        raise InvalidDevice("spec must be a mapping", field=f"Device {name}: spec")
    raw_devices = spec.get("devices") or []
    if not isinstance(raw_devices, list):
        raise InvalidDevice("spec.devices must be a list", field=f"Device {name}: spec.devices")
    devices: list[DeviceInfo] = []
    seen: set[tuple[str, int]] = set()
    for i, d in enumerate(raw_devices):
        where = f"Device {name}: spec.devices[{i}]"
        if not isinstance(d, dict):
            raise InvalidDevice("each device must be a mapping", field=where)
        dtype = d.get("type", d.get("deviceType"))
        if not isinstance(dtype, str) or not dtype:
            raise InvalidDevice("type is missing (gpu, rdma or fpga)", field=where)
        if "minor" not in d:
            raise InvalidDevice("minor is missing: give the device's index on the node (0, 1, ...)", field=where)
        minor = d["minor"]
        if isinstance(minor, bool) or not isinstance(minor, int) or minor < 0:
            raise InvalidDevice(f"minor must be an integer >= 0, got {minor!r}", field=where)
        if (dtype, minor) in seen:
            raise InvalidDevice(f"{dtype} minor {minor} is listed twice", field=where)
        seen.add((dtype, minor))
        dev_id = d.get("id", d.get("uuid"))
        if not isinstance(dev_id, str) or not dev_id:
            raise InvalidDevice("id is missing: give the device's unique id (a GPU's UUID, an RDMA or FPGA "
                                "device's name)", field=where)
        resources = d.get("resources", d.get("resource"))
        if not resources:
            example = ("koordinator.sh/gpu-core: \"100\", koordinator.sh/gpu-memory: 16Gi" if dtype == names.GPU
                       else f"koordinator.sh/{dtype}: \"100\"")
            raise InvalidDevice(f"resources are missing: give the device's capacity, e.g. {{{example}}}", field=where)
        if not isinstance(resources, dict):
            raise InvalidDevice("resources must be a mapping", field=where)
        health = d.get("health", True)
        if not isinstance(health, bool):
            raise InvalidDevice(f"health must be true or false, got {health!r}", field=where)
        try:
            if dtype == names.GPU:
                core_name, core_q = "gpu-core", _first(resources, names.DEV_GPU_CORE)
                core = quantity_int(core_q, field="gpu-core") * 10 if core_q is not None else WHOLE
                mem_q = _first(resources, names.DEV_GPU_MEMORY)
                if mem_q is None:
                    raise InvalidDevice("missing: a gpu needs its memory, e.g. koordinator.sh/gpu-memory: 16Gi",
                                        field="koordinator.sh/gpu-memory")
                memory = quantity_int(mem_q, field="gpu-memory")
            else:
                core_name, core_q = dtype, _first(resources, (f"koordinator.sh/{dtype}", f"kubernetes.io/{dtype}"))
                core = quantity_int(core_q, field=dtype) * 10 if core_q is not None else WHOLE
                memory = 0
        except InvalidInput as e:
            raise InvalidDevice(e.message, field=f"{where}.resources.{e.field}") from e
        if core <= 0:
            raise InvalidDevice(f"{core_name} is {core_q}: a device's capacity must be above 0 (100 = all of it)",
                                field=where)
        if memory < 0:
            raise InvalidDevice(f"gpu-memory is {mem_q}: a GPU's memory must be 0 or more bytes, e.g. 16Gi",
                                field=where)
        model = d.get("model", "")
        devices.append(
            DeviceInfo(
                type=dtype,
                minor=minor,
                id=dev_id,
                health=health,
                core_milli=core,
                memory=memory,
                model=model if isinstance(model, str) else "",
            )
        )
    devices.sort(key=lambda x: (x.type, x.minor))
    bandwidth = None
    topologies = spec.get("topologies") or {}
    example = '{name: bandwidth, topology: "[[750,48],[48,750]]"}'
    if not isinstance(topologies, dict):
        raise InvalidDevice(f"must map each device type to its list of topologies, e.g. {{gpu: [{example}]}}",
                            field=f"Device {name}: spec.topologies")
    gpu_topologies = topologies.get(names.GPU) or []
    if not isinstance(gpu_topologies, list) or not all(isinstance(e, dict) for e in gpu_topologies):
        raise InvalidDevice(f"must be a list of topologies, e.g. [{example}]",
                            field=f"Device {name}: spec.topologies.gpu")
    for entry in gpu_topologies:
        if entry.get("name") == "bandwidth":
            n_gpus = sum(1 for d in devices if d.type == names.GPU)
            bandwidth = parse_topology_matrix(
                entry.get("topology", ""), field=f"Device {name}: spec.topologies.gpu", size=n_gpus
            )
    held: list[str] = []
    held_pods: list[str] = []
    annotations = meta.get("annotations") or {}
    for key in (names.DEVICE_CHECKPOINTS, names.GPU_CHECKPOINTS):
        raw = annotations.get(key) if isinstance(annotations, dict) else None
        if not raw:
            continue
        try:
            entries = json.loads(raw)
            # a shared card's replica id (GPU-x::3, NVIDIA's time-slicing) holds the card itself
            held += [str(i).split("::", 1)[0] for e in entries for i in (e.get("deviceIDs") or [])]
            held_pods += [str(e["podUID"]) for e in entries if e.get("podUID")]
        except (json.JSONDecodeError, AttributeError, TypeError) as e:
            raise InvalidDevice(f"annotation {key} must be a JSON list of checkpoint entries",
                                field=f"Device {name}") from e
    labels = meta.get("labels") or {}
    model = labels.get(names.NODE_GPU_MODEL, "") if isinstance(labels, dict) else ""
    return NodeDevices(node=name, devices=tuple(devices), gpu_bandwidth=bandwidth,
                       held_outside=tuple(dict.fromkeys(held)), held_pods=tuple(dict.fromkeys(held_pods)),
                       gpu_model=model if isinstance(model, str) else "")


def _pct(milli: int) -> str:
    return str(milli // 10) if milli % 10 == 0 else f"{milli / 10:g}"


def device_object(nd: NodeDevices, *, annotations: dict[str, str] | None = None,
                  labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The Device object (dict) that describes ``nd``, in DESIGN.md's shape."""
    devices: list[dict[str, Any]] = []
    for d in nd.devices:
        if d.type == names.GPU:
            resources = {
                "koordinator.sh/gpu-core": _pct(d.core_milli),
                "koordinator.sh/gpu-memory": format_bytes(d.memory),
                "koordinator.sh/gpu-memory-ratio": "100",
            }
        else:
            resources = {f"koordinator.sh/{d.type}": _pct(d.core_milli)}
        entry: dict[str, Any] = {"type": d.type, "minor": d.minor, "id": d.id, "health": d.health}
        if d.model:
            entry["model"] = d.model
        entry["resources"] = resources
        devices.append(entry)
    spec: dict[str, Any] = {"devices": devices}
    if nd.gpu_bandwidth is not None:
        spec["topologies"] = {
            names.GPU: [{"name": "bandwidth", "topology": json.dumps([list(r) for r in nd.gpu_bandwidth])}]
        }
    meta: dict[str, Any] = {"name": nd.node}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": names.DEVICE_API_VERSION, "kind": names.DEVICE_KIND, "metadata": meta, "spec": spec}
