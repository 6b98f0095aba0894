"""Aliyun gpushare's annotations (seed 002, and what its extender writes at bind):

- ``ALIYUN_COM_GPU_MEM_IDX``: the GPU index (several, comma-separated, when devshare spreads an
  Aliyun pod over several GPUs; upstream never does, its plugin reads a single index),
- ``ALIYUN_COM_GPU_MEM_POD``: the pod's ``aliyun.com/gpu-mem`` as written (MiB, summed over its
  containers), which the device plugin matches against its Allocate call,
- ``ALIYUN_COM_GPU_MEM_DEV``: the GPU's total memory (MiB), left out when not known,
- ``ALIYUN_COM_GPU_MEM_ASSUME_TIME``: when it was assumed (unix nanoseconds),
- ``ALIYUN_COM_GPU_MEM_ASSIGNED``: ``"false"`` at bind; the device plugin sets ``"true"``.
"""

from __future__ import annotations

import msgspec

from devshare.model import names
from devshare.model.codecs.units import index_list
from devshare.model.errors import InvalidAnnotation


class AliyunAllocation(msgspec.Struct, frozen=True, kw_only=True):
    minors: tuple[int, ...]
    pod_mib: int
    dev_mib: int | None = None
    assume_time_ns: int = 0
    assigned: bool = False


def encode_aliyun(a: AliyunAllocation) -> dict[str, str]:
    out = {
        names.ALIYUN_IDX: ",".join(str(m) for m in a.minors),
        names.ALIYUN_POD: str(a.pod_mib),
        names.ALIYUN_ASSUME_TIME: str(a.assume_time_ns),
        names.ALIYUN_ASSIGNED: "true" if a.assigned else "false",
    }
    if a.dev_mib is not None:
        out[names.ALIYUN_DEV] = str(a.dev_mib)
    return out


def _int(annotations: dict[str, str], key: str) -> int | None:
    if key not in annotations:
        return None
    text = str(annotations[key]).strip()
    if not (text.isascii() and text.isdigit()):
        raise InvalidAnnotation(f"must be a whole number >= 0, got {annotations[key]!r}", field=f"annotation {key}")
    return int(text)


def decode_aliyun(annotations: dict[str, str]) -> AliyunAllocation | None:
    """None when the pod carries no ``ALIYUN_COM_GPU_MEM_IDX``."""
    if names.ALIYUN_IDX not in annotations:
        return None
    assigned = str(annotations.get(names.ALIYUN_ASSIGNED, "false")).lower()
    if assigned not in ("true", "false"):
        raise InvalidAnnotation(f"must be true or false, got {assigned!r}", field=f"annotation {names.ALIYUN_ASSIGNED}")
    return AliyunAllocation(
        minors=tuple(index_list(str(annotations[names.ALIYUN_IDX]), field=f"annotation {names.ALIYUN_IDX}")),
        pod_mib=_int(annotations, names.ALIYUN_POD) or 0,
        dev_mib=_int(annotations, names.ALIYUN_DEV),
        assume_time_ns=_int(annotations, names.ALIYUN_ASSUME_TIME) or 0,
        assigned=assigned == "true",
    )
