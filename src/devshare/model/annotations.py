"""All the annotations a scheduled pod gets: the canonical one, those of the dialect it asked in
(so that that dialect's node-side components work unchanged; each dialect's module writes its
own, :meth:`~devshare.model.dialects.base.Dialect.encode`), and the group topology one."""

from __future__ import annotations

from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.codecs.canonical import encode_canonical
from devshare.model.codecs.topology import encode_topology
from devshare.model.dialects import dialect_of
from devshare.model.request import PodRequest


def container_gpus(alloc: PodAllocation) -> dict[int, list[int]]:
    """Container index -> its GPU minors, for the containers that got GPUs."""
    out: dict[int, list[int]] = {}
    for i, c in enumerate(alloc.containers):
        minors = [g.minor for g in c.devices if g.type == names.GPU]
        if minors:
            out[i] = minors
    return out


def encode_annotations(
    pod: PodRequest,
    alloc: PodAllocation,
    *,
    now_ns: int,
    visible_gpus: list[int] | None = None,
    device_memory: dict[int, int] | None = None,
) -> dict[str, str]:
    """Every annotation to write on ``pod`` for ``alloc``.

    ``now_ns``: unix nanoseconds (Aliyun's assume time); ``visible_gpus``: the GPUs of the node
    given to the pod's group (adds the topology annotation); ``device_memory``: GPU minor -> total
    bytes (Aliyun's DEV)."""
    out = encode_canonical(alloc)
    dialect = dialect_of(pod.dialect)
    if dialect is not None:
        out.update(dialect.encode(pod, alloc, now_ns=now_ns, device_memory=device_memory))
    if visible_gpus is not None:
        out.update(encode_topology(container_gpus(alloc), visible_gpus))
    return out
