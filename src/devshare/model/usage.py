"""What the GPUs of a node really use: the ``status.usage`` block of its Device object.

The node agent (:mod:`devshare.agent.usage`) writes it; ``/ui`` and ``kubectl get device`` read it.
Per GPU, the memory its processes hold and its utilization, and per container its use beside its
share (``pod`` is ``namespace/name``; ``unknown/unknown`` and container ``unknown`` for processes no
container could be found for)::

    status:
      usage:
        at: "2026-11-28T07:40:00Z"
        gpus:
        - minor: 0
          id: GPU-...
          memoryUsed: 3221225472         # bytes
          utilization: 0.4               # share of the GPU's SMs kept busy, 0..1 (null: no samples)
          containers:
          - {pod: team/train-0, container: main, memoryUsed: 3221225472, memoryAllocated: 4294967296,
             utilization: 0.4, coreAllocated: 0.5}
"""

from __future__ import annotations

from typing import Any

import msgspec

from devshare.model.errors import InvalidDevice


class ContainerUse(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    pod: str  # namespace/name
    container: str
    memory_used: int = 0
    memory_allocated: int = 0
    utilization: float | None = None
    core_allocated: float = 0.0


class GpuUse(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    minor: int
    id: str
    memory_used: int = 0
    utilization: float | None = None
    containers: tuple[ContainerUse, ...] = ()


class NodeUsage(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    at: str
    gpus: tuple[GpuUse, ...] = ()


def usage_status(usage: NodeUsage) -> dict[str, Any]:
    """The ``status.usage`` block (plain JSON types)."""
    out: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(usage))
    return out


def parse_usage(device: Any) -> NodeUsage | None:
    """The usage a Device object carries, or None when it carries none. Raises :class:`InvalidDevice`
    naming the bad field."""
    status = device.get("status") if isinstance(device, dict) else None
    raw = status.get("usage") if isinstance(status, dict) else None
    if raw is None:
        return None
    try:
        return msgspec.convert(raw, NodeUsage)
    except msgspec.ValidationError as e:
        name = (device.get("metadata") or {}).get("name", "?")
        raise InvalidDevice(f"{e}", field=f"Device {name}: status.usage") from None
