"""``devshare.io/allocation``: the canonical allocation annotation (DESIGN.md), the whole truth
from which the state is rebuilt after a restart.

Init containers that ask for devices are listed too, with ``"init": true`` (their devices are handed
on to the app containers, as kubelet does: :meth:`~devshare.model.allocation.PodAllocation.usage`).
GPU entries carry ``type``, ``minor``, ``id``, ``core`` and ``memoryRatio`` (percent of one
device; fractional when the thousandths are not a multiple of ten) and ``memory`` (bytes). Other
device types (RDMA, FPGA, ...) carry ``type``, ``minor``, ``id`` and ``share`` (percent).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from devshare.model import names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.codecs.units import milli_of, percent
from devshare.model.errors import InvalidAnnotation

NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class _Device(msgspec.Struct):
    type: str
    minor: NonNegative
    id: str = ""
    core: float = 0
    memory: NonNegative = 0
    memoryRatio: float = 0
    share: float | None = None


class _Container(msgspec.Struct):
    name: str
    devices: list[_Device] = []
    init: bool = False


class _Allocation(msgspec.Struct):
    node: str
    containers: list[_Container] = []


_decoder = msgspec.json.Decoder(_Allocation)


def _device(g: DeviceGrant) -> dict[str, Any]:
    if g.type == names.GPU:
        return {
            "type": g.type,
            "minor": g.minor,
            "id": g.id,
            "core": percent(g.core_milli),
            "memory": g.memory,
            "memoryRatio": percent(g.memory_ratio_milli),
        }
    return {"type": g.type, "minor": g.minor, "id": g.id, "share": percent(g.core_milli)}


def _container(c: ContainerAllocation) -> dict[str, Any]:
    out: dict[str, Any] = {"name": c.name, "devices": [_device(g) for g in c.devices]}
    if c.init:
        out["init"] = True  # an init container (its devices are handed on: PodAllocation.usage)
    return out


def encode_allocation(alloc: PodAllocation) -> str:
    """The annotation's value (compact JSON)."""
    doc = {
        "node": alloc.node,
        "containers": [_container(c) for c in alloc.containers],
    }
    return msgspec.json.encode(doc).decode()


def parse_allocation(text: str) -> PodAllocation:
    """Decode the annotation's value. Raises :class:`InvalidAnnotation` when it is malformed."""
    field = f"annotation {names.ALLOCATION}"
    try:
        raw = _decoder.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise InvalidAnnotation(f"not a devshare allocation ({e})", field=field) from e
    containers: list[ContainerAllocation] = []
    for c in raw.containers:
        grants: list[DeviceGrant] = []
        for d in c.devices:
            if d.type == names.GPU:
                grant = DeviceGrant(
                    type=d.type,
                    minor=d.minor,
                    id=d.id,
                    core_milli=milli_of(d.core, field=field),
                    memory=d.memory,
                    memory_ratio_milli=milli_of(d.memoryRatio, field=field),
                )
            else:
                share = d.share if d.share is not None else d.core
                grant = DeviceGrant(type=d.type, minor=d.minor, id=d.id, core_milli=milli_of(share, field=field))
            grants.append(grant)
        containers.append(ContainerAllocation(name=c.name, devices=tuple(grants), init=c.init))
    return PodAllocation(node=raw.node, containers=tuple(containers))


def encode_canonical(alloc: PodAllocation) -> dict[str, str]:
    return {names.ALLOCATION: encode_allocation(alloc)}


def decode_allocation(annotations: dict[str, str]) -> PodAllocation | None:
    """The canonical allocation of a pod's annotations; None when it has none."""
    text = annotations.get(names.ALLOCATION)
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidAnnotation("must be a JSON string", field=f"annotation {names.ALLOCATION}")
    return parse_allocation(text)
