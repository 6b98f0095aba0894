"""A node's devices as the peers report them, read beside devshare's own Device object, so that a
node still running koordlet, HAMi's or Volcano's device plugin is scheduled with no devshare agent.

Sources, the first one a node has wins (:func:`choose`):

1. devshare's ``Device`` (``devshare.io/v1alpha1``: :func:`devshare.model.device.parse_device`);
2. Koordinator's ``Device`` (``scheduling.koordinator.sh/v1alpha1``, as koordlet writes it:
   koordinator-sh/koordinator v1.8.0-61-ga7a1b76b ``apis/scheduling/v1alpha1/device_types.go``;
   ``minor`` optional, ``health`` defaulted false, resources ``koordinator.sh/gpu-core``, ``gpu-memory``,
   ``gpu-memory-ratio``; the ``node.koordinator.sh/gpu-checkpoints`` annotation): :func:`koordinator_device`;
3. HAMi's node annotation ``hami.io/node-nvidia-register`` (Project-HAMi/HAMi v2.10.0
   ``pkg/device/devices.go``: JSON ``[{"id","count","devmem","devcore","type","numa","health","index","mode"}]``
   from ``MarshalNodeDevices``, or the older ``id,count,devmem,devcore,type,numa,health[,index,mode]:``
   of ``EncodeNodeDevices``; memory in MiB): :func:`hami_register`;
4. Volcano's vGPU node annotation ``volcano.sh/node-vgpu-register`` (``UUID,count,devmem,type,health,mode:``,
   volcano-sh/volcano ``pkg/scheduler/api/devices/nvidia/vgpu/utils.go`` ``decodeNodeDevices``):
   :func:`volcano_register`;
5. the node's capacity of Volcano's gpushare (``volcano.sh/gpu-memory`` MiB in all over
   ``volcano.sh/gpu-number`` cards, ``share.go``; unhealthy ``volcano.sh/gpu-unhealthy-ids``) or Aliyun's
   (``aliyun.com/gpu-mem`` in all over ``aliyun.com/gpu-count``, ``pkg/utils/node.go``; read in MiB, as
   devshare's Aliyun dialect does): :func:`capacity_devices`. Cards of equal memory, ids made up
   (``<node>/gpu-<index>``): the peers name these cards by index only.

A source that is malformed is skipped with a reason (the next one is used), never half-read.
"""

from __future__ import annotations

import json
from typing import Any

from devshare.model import names
from devshare.model.device import DeviceInfo, NodeDevices, parse_device
from devshare.model.dialects.hami import HAMI_REGISTER
from devshare.model.dialects.volcano import GPUSHARE_MEMORY, GPUSHARE_NUMBER, VGPU_REGISTER
from devshare.model.errors import InvalidDevice, InvalidInput
from devshare.model.quantity import MIB, parse_quantity
from devshare.model.request import WHOLE

ALIYUN_GPU_MEM = "aliyun.com/gpu-mem"
ALIYUN_GPU_COUNT = "aliyun.com/gpu-count"
VOLCANO_UNHEALTHY = "volcano.sh/gpu-unhealthy-ids"

SOURCES = ("devshare", "koordinator", "hami", "volcano-vgpu", "capacity")


def koordinator_device(obj: Any) -> NodeDevices:
    """Koordinator's Device, read into devshare's terms. Raises :class:`InvalidDevice` naming the field."""
    if not isinstance(obj, dict):
        raise InvalidDevice("a Koordinator Device must be a mapping with metadata and spec")
    doc = json.loads(json.dumps(obj))  # a copy (the caller's object is not changed)
    spec = doc.get("spec") if isinstance(doc.get("spec"), dict) else {}
    devices = spec.get("devices") or []
    if not isinstance(devices, list):
        raise InvalidDevice("spec.devices must be a list", field="Koordinator Device")
    used: dict[str, set[int]] = {}
    for d in devices:
        if isinstance(d, dict) and isinstance(d.get("minor"), int):
            used.setdefault(str(d.get("type")), set()).add(d["minor"])
    for d in devices:
        if not isinstance(d, dict):
            continue
        dtype = str(d.get("type") or "")
        if d.get("minor") is None:  # RDMA/FPGA without a minor: the next free index
            taken = used.setdefault(dtype, set())
            d["minor"] = next(i for i in range(len(devices) + len(taken) + 1) if i not in taken)
            taken.add(d["minor"])
        if not d.get("id"):
            d["id"] = f"{dtype}-{d['minor']}"
        d.setdefault("health", False)  # Koordinator's default (koordlet writes true for healthy devices)
        labels = d.get("labels")
        if isinstance(labels, dict) and not d.get("model"):
            d["model"] = str(labels.get("model") or labels.get("type") or "")
    spec.pop("topologies", None)  # Koordinator's Device has no bandwidth matrix
    doc["spec"] = {"devices": devices}
    meta = _mapping(doc.get("metadata"))
    labels = _mapping(meta.get("labels"))
    if names.KOORD_NODE_GPU_MODEL in labels and names.NODE_GPU_MODEL not in labels:
        labels[names.NODE_GPU_MODEL] = labels[names.KOORD_NODE_GPU_MODEL]
        meta["labels"] = labels
    try:
        return parse_device(doc)
    except InvalidDevice as e:
        raise InvalidDevice(f"Koordinator Device: {e.message}", field=e.field) from None


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _node_meta(node: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    obj = _mapping(node)
    meta = _mapping(obj.get("metadata"))
    return str(meta.get("name") or ""), _mapping(meta.get("annotations")), _mapping(obj.get("status"))


def _hami_entries(text: str) -> list[dict[str, Any]]:
    text = text.strip()
    if text.startswith("["):
        doc = json.loads(text)
        if not isinstance(doc, list) or not all(isinstance(e, dict) for e in doc):
            raise ValueError("not a JSON list of devices")
        return doc
    out = []
    for part in text.split(":"):
        if not part.strip():
            continue
        f = part.split(",")
        if len(f) not in (7, 9):
            raise ValueError(f"{part!r} has {len(f)} fields, not 7 or 9")
        out.append({"id": f[0], "count": int(f[1]), "devmem": int(f[2]), "devcore": int(f[3]), "type": f[4],
                    "health": f[6].strip().lower() == "true", **({"index": int(f[7])} if len(f) == 9 else {})})
    return out


def hami_register(node: Any) -> NodeDevices | None:
    """The cards HAMi's device plugin registered on ``node`` (None when it registered none)."""
    name, ann, _ = _node_meta(node)
    text = ann.get(HAMI_REGISTER)
    if not text:
        return None
    try:
        entries = _hami_entries(str(text))
        indexes = [int(e.get("index") or 0) for e in entries]  # JSON leaves index 0 out (omitempty)
        positional = len(set(indexes)) != len(entries)  # no index (older releases): the order
        devices = []
        for pos, e in enumerate(entries):
            mem, core = int(e.get("devmem") or 0), int(e.get("devcore") or 100)
            if not e.get("id") or mem <= 0 or core <= 0:
                raise ValueError(f"device {pos}: id, devmem (MiB) and devcore must be given, above 0")
            devices.append(DeviceInfo(type=names.GPU, minor=pos if positional else indexes[pos],
                                      id=str(e["id"]), health=bool(e.get("health")), core_milli=core * 10,
                                      memory=mem * MIB, model=str(e.get("type") or "")))
    except (ValueError, TypeError, json.JSONDecodeError) as e:
        raise InvalidDevice(f"annotation {HAMI_REGISTER} is not HAMi's device list ({e})",
                            field=f"Node {name}") from None
    return NodeDevices(node=name, devices=tuple(sorted(devices, key=lambda d: d.minor)))


def volcano_register(node: Any) -> NodeDevices | None:
    """The cards Volcano's vGPU device plugin registered on ``node`` (None when it registered none)."""
    name, ann, _ = _node_meta(node)
    text = ann.get(VGPU_REGISTER)
    if not text:
        return None
    devices = []
    for pos, part in enumerate(p for p in str(text).split(":") if "," in p):
        f = part.split(",")
        try:
            if len(f) < 5 or not f[0] or int(f[2]) <= 0:
                raise ValueError
            devices.append(DeviceInfo(type=names.GPU, minor=pos, id=f[0], health=f[4].strip().lower() == "true",
                                      core_milli=WHOLE, memory=int(f[2]) * MIB, model=f[3]))
        except ValueError:
            raise InvalidDevice(f"annotation {VGPU_REGISTER}: {part!r} is not UUID,count,devmem,type,health,mode",
                                field=f"Node {name}") from None
    return NodeDevices(node=name, devices=tuple(devices)) if devices else None


def _capacity(status: dict[str, Any], key: str) -> int | None:
    for part in ("capacity", "allocatable"):
        values = status.get(part)
        if isinstance(values, dict) and key in values:
            try:
                q = parse_quantity(values[key])
            except InvalidInput:
                return None
            return int(q) if q.denominator == 1 and q > 0 else None
    return None


def capacity_devices(node: Any) -> NodeDevices | None:
    """Cards told by the node's capacity of Volcano's or Aliyun's gpushare (None when it has neither)."""
    name, ann, status = _node_meta(node)
    for mem_key, count_key in ((GPUSHARE_MEMORY, GPUSHARE_NUMBER), (ALIYUN_GPU_MEM, ALIYUN_GPU_COUNT)):
        total, count = _capacity(status, mem_key), _capacity(status, count_key)
        if total and count:
            unhealthy = {s.strip() for s in str(ann.get(VOLCANO_UNHEALTHY, "")).split(",") if s.strip()}
            return NodeDevices(node=name, devices=tuple(
                DeviceInfo(type=names.GPU, minor=i, id=f"{name}/gpu-{i}", health=str(i) not in unhealthy,
                           memory=total // count * MIB) for i in range(count)))
    return None


def node_sources(node: Any) -> list[tuple[str, NodeDevices | None, str | None]]:
    """(source, devices or None, why it could not be read) for the node-borne sources, in order."""
    out: list[tuple[str, NodeDevices | None, str | None]] = []
    for source, reader in (("hami", hami_register), ("volcano-vgpu", volcano_register), ("capacity", capacity_devices)):
        try:
            out.append((source, reader(node), None))
        except InvalidDevice as e:
            out.append((source, None, str(e)))
    return out


def choose(found: dict[str, NodeDevices | None]) -> tuple[str, NodeDevices] | None:
    """The inventory a node is scheduled on: the first source (:data:`SOURCES`) that has one."""
    for source in SOURCES:
        nd = found.get(source)
        if nd is not None:
            return source, nd
    return None
