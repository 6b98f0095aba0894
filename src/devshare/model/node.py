"""What devshare reads from a Kubernetes Node: its name, labels and (optionally) CPU/memory."""

from __future__ import annotations

from typing import Any

import msgspec

from devshare.model import names
from devshare.model.errors import InvalidInput
from devshare.model.quantity import parse_quantity


class NodeInfo(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    gpu_model: str = ""
    compute_policy: str | None = None  # mGPU compute policy label, if any
    multi_gpu_share: bool = False  # node allows one container over several shared GPUs
    cpu_milli: int = 0  # 0 = not tracked (kube-scheduler checks CPU itself)
    memory_bytes: int = 0  # 0 = not tracked
    unschedulable: bool = False


def node_info_from_labels(
    name: str,
    labels: dict[str, str] | None = None,
    *,
    cpu_milli: int = 0,
    memory_bytes: int = 0,
    unschedulable: bool = False,
) -> NodeInfo:
    labels = dict(labels or {})
    policy = labels.get(names.COMPUTE_POLICY)
    if policy is not None and policy not in names.COMPUTE_POLICIES:
        raise InvalidInput(
            f"label {names.COMPUTE_POLICY}={policy!r} is not one of {', '.join(names.COMPUTE_POLICIES)}",
            field=f"Node {name}",
        )
    return NodeInfo(
        name=name,
        labels=labels,
        gpu_model=labels.get(names.NODE_GPU_MODEL, ""),
        compute_policy=policy,
        multi_gpu_share=labels.get(names.MULTI_GPU_SHARE, "").lower() == "true",
        cpu_milli=cpu_milli,
        memory_bytes=memory_bytes,
        unschedulable=unschedulable,
    )


def parse_node(obj: Any, *, track_resources: bool = False) -> NodeInfo:
    """Parse a v1 Node (dict). CPU/memory are read only when ``track_resources`` is set."""
    if not isinstance(obj, dict):
        raise InvalidInput("a Node must be a mapping with metadata")
    meta = obj.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not name:
        raise InvalidInput("metadata.name is missing", field="Node")
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        raise InvalidInput("metadata.labels must be a mapping", field=f"Node {name}")
    spec = obj.get("spec") or {}
    if not isinstance(spec, dict):
        raise InvalidInput("spec must be a mapping", field=f"Node {name}")
    unschedulable = spec.get("unschedulable") or False
    if not isinstance(unschedulable, bool):  # bool("false") would be True: the node silently unschedulable
        raise InvalidInput(f"spec.unschedulable must be true or false, got {unschedulable!r}", field=f"Node {name}")
    cpu = mem = 0
    if track_resources:
        status = obj.get("status") or {}
        if not isinstance(status, dict):
            raise InvalidInput("status must be a mapping", field=f"Node {name}")
        alloc = status.get("allocatable") or {}
        if not isinstance(alloc, dict):
            raise InvalidInput('status.allocatable must be a mapping such as {cpu: "8", memory: 16Gi}',
                               field=f"Node {name}")
        if "cpu" in alloc:
            cpu = int(parse_quantity(alloc["cpu"], field=f"Node {name}: allocatable.cpu") * 1000)
        if "memory" in alloc:
            mem = int(parse_quantity(alloc["memory"], field=f"Node {name}: allocatable.memory"))
    return node_info_from_labels(
        name,
        {str(k): str(v) for k, v in labels.items()},
        cpu_milli=cpu,
        memory_bytes=mem,
        unschedulable=unschedulable,
    )
