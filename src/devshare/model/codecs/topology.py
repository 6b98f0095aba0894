"""``topology.scheduling.koordinator.sh/gpu`` (seed 003): ``{"allocatedGPUs": {"<container index>":
["4","5"]}, "visibleGPUs": ["4","5","6","7"]}``: the GPUs each container uses (CUDA_VISIBLE_DEVICES)
and the GPUs of the node given to the pod's whole group (NVIDIA_VISIBLE_DEVICES)."""

from __future__ import annotations

import json
from typing import Any

from devshare.model import names
from devshare.model.codecs.units import json_object
from devshare.model.errors import InvalidAnnotation

FIELD = f"annotation {names.TOPOLOGY_GPU}"


def encode_topology(allocated: dict[int, list[int]], visible: list[int]) -> dict[str, str]:
    doc = {
        "allocatedGPUs": {str(i): [str(m) for m in minors] for i, minors in sorted(allocated.items())},
        "visibleGPUs": [str(m) for m in visible],
    }
    return {names.TOPOLOGY_GPU: json.dumps(doc, separators=(",", ":"))}


def _index(value: Any) -> int:
    text = str(value) if isinstance(value, str | int) and not isinstance(value, bool) else ""
    if not (text.isascii() and text.isdigit()):
        raise InvalidAnnotation(f"GPU and container indexes must be whole numbers >= 0, got {value!r}", field=FIELD)
    return int(text)


def decode_topology(annotations: dict[str, str]) -> tuple[dict[int, list[int]], list[int]] | None:
    """(container index -> GPU indexes, visible GPU indexes); None when absent."""
    doc = json_object(annotations, names.TOPOLOGY_GPU, shape='{"allocatedGPUs": {...}, "visibleGPUs": [...]}')
    if doc is None:
        return None
    allocated = doc.get("allocatedGPUs", {})
    visible = doc.get("visibleGPUs", [])
    if not isinstance(allocated, dict) or not isinstance(visible, list):
        raise InvalidAnnotation("allocatedGPUs must be an object and visibleGPUs a list", field=FIELD)
    out: dict[int, list[int]] = {}
    for key, minors in allocated.items():
        if not isinstance(minors, list):
            raise InvalidAnnotation(f"allocatedGPUs[{key!r}] must be a list of GPU indexes", field=FIELD)
        out[_index(key)] = [_index(m) for m in minors]
    return out, [_index(m) for m in visible]
