"""mGPU's scheduling result (seed 000): ``vke.volcengine.com/gpu-index-container-<container name>:
"1,0"`` (the GPU indexes of each container that got GPUs) and ``vke.volcengine.com/assumed: "true"``.

Kubernetes limits an annotation name to 63 characters, so a container name longer than 43
characters gives a key the API server refuses; mGPU's node agent has the same limit.
"""

from __future__ import annotations

from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.codecs.units import index_list


def encode_mgpu(alloc: PodAllocation) -> dict[str, str]:
    out = {names.MGPU_ASSUMED: "true"}
    for c in alloc.containers:
        minors = [g.minor for g in c.devices if g.type == names.GPU]
        if minors:
            out[names.MGPU_INDEX_PREFIX + c.name] = ",".join(str(m) for m in minors)
    return out


def decode_mgpu(annotations: dict[str, str]) -> dict[str, list[int]] | None:
    """Container name -> GPU indexes; None when the pod carries no mGPU result."""
    out: dict[str, list[int]] = {}
    for key, value in annotations.items():
        if key.startswith(names.MGPU_INDEX_PREFIX):
            out[key[len(names.MGPU_INDEX_PREFIX) :]] = index_list(str(value), field=f"annotation {key}")
    if not out and annotations.get(names.MGPU_ASSUMED) != "true":
        return None
    return out
