"""Resource names under a prefix a dialect owns that no dialect reads: misspellings are refused with
what was meant, other systems' names are listed and left alone. One rule, asked by the pod reader
(:func:`devshare.model.pod.read_pod`), so the webhook, ``devshare schedule`` and the extender agree.

A name under ``koordinator.sh/``, ``nvidia.com/``, ``volcano.sh/``, ``vke.volcengine.com/`` or
``aliyun.com/`` that no registered dialect (or configured device type) reads:

- is another system's name (:data:`OTHER_SYSTEMS`, :data:`OTHER_PATTERNS`): allowed, devshare does not
  place it (kube-scheduler and that system's device plugin do);
- names a GPU ask (the first word of its last part names a GPU, ``gpu``, ``vgpu``, ``gpumem``...,
  or its compute or memory): refused, naming the resource and what was meant
  (``koordinator.sh/gpu-cores``: "did you mean koordinator.sh/gpu-core?"). Placed as it is, it would
  be counted on no card: a pod that names memory and no compute gets the wrong device;
- is anything else (another device type, ``koordinator.sh/npu``, which the configuration or the
  unconfigured-type rule judges; a network resource of the same vendor): allowed here.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from collections.abc import Iterable

from devshare.model import dialects

PREFIXES = ("koordinator.sh/", "nvidia.com/", "volcano.sh/", "vke.volcengine.com/", "aliyun.com/")

# other systems' names under those prefixes (what they are, and where they come from)
OTHER_SYSTEMS: dict[str, str] = {
    # Koordinator's colocation (QoS) resources: koordinator-sh/koordinator apis/extension/deprecated.go
    # (KoordBatchCPU, KoordBatchMemory) and resource.go (batch-/mid- under kubernetes.io/ today)
    "koordinator.sh/batch-cpu": "Koordinator's Batch CPU (colocation)",
    "koordinator.sh/batch-memory": "Koordinator's Batch memory (colocation)",
    "koordinator.sh/mid-cpu": "Koordinator's Mid CPU (colocation)",
    "koordinator.sh/mid-memory": "Koordinator's Mid memory (colocation)",
    # NVIDIA's device plugin: time-slicing and MPS with renameByDefault (NVIDIA/k8s-device-plugin README)
    "nvidia.com/gpu.shared": "a shared GPU replica of NVIDIA's device plugin (time-slicing or MPS)",
    # HAMi's task priority (Project-HAMi/HAMi pkg/device/nvidia/device.go, resourcePriorityName), read by HAMi-core
    "nvidia.com/priority": "HAMi's task priority (HAMi-core on the node reads it; it asks for no device)",
    # Aliyun's cGPU compute share (ACK's cGPU), which its own plugin serves
    "aliyun.com/gpu-core.percentage": "Aliyun cGPU's compute share (ACK's cGPU)",
}
OTHER_PATTERNS: dict[str, str] = {
    "nvidia.com/mig-*": "a MIG instance of NVIDIA's device plugin (mixed strategy)",
}
# the first word of a last part naming a GPU ask: refused when no dialect reads it
GPU_WORDS = ("gpu", "core", "cores", "mem", "memory")


def owned_prefix(name: str) -> str | None:
    return next((p for p in PREFIXES if name.startswith(p)), None)


def other_system(name: str) -> str | None:
    """What another system's name is (None when it is none of those listed)."""
    if name in OTHER_SYSTEMS:
        return OTHER_SYSTEMS[name]
    return next((what for pattern, what in OTHER_PATTERNS.items() if fnmatch.fnmatchcase(name, pattern)), None)


def meant(name: str) -> str | None:
    """The name devshare reads that ``name`` most likely misspells (None when none is close)."""
    known = sorted(dialects.resource_names())
    hits = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
    if hits:
        return hits[0]
    leaf = name.split("/", 1)[1]
    same_prefix = [k for k in known if k.startswith(name.split("/", 1)[0] + "/")]
    hits = difflib.get_close_matches(leaf, [k.split("/", 1)[1] for k in same_prefix], n=1, cutoff=0.6)
    return next((k for k in same_prefix if hits and k.endswith("/" + hits[0])), None)


def refused(name: str) -> str | None:
    """Why ``name`` (a container resource asked with a non-zero value) is refused; None when it is not."""
    prefix = owned_prefix(name)
    if prefix is None or name in dialects.resource_names() or other_system(name) is not None:
        return None
    first = re.split(r"[-._]", name[len(prefix):].lower(), maxsplit=1)[0]
    if "gpu" not in first and first not in GPU_WORDS:
        return None
    guess = meant(name)
    hint = f"did you mean {guess}?" if guess else (
        "no dialect devshare speaks defines it; the names under " + prefix + " it reads are: "
        + ", ".join(sorted(n for n in dialects.resource_names() if n.startswith(prefix))))
    return (f"{name} is not a resource name devshare knows: {hint} (as written it would be placed on no card; "
            "other systems' names under that prefix are listed in docs/webhook.md)")


def refusals(names: Iterable[str]) -> list[str]:
    return [m for m in (refused(n) for n in names) if m]


def judged(name: str) -> bool:
    """Whether a pod asking ``name`` is one the webhook must look at (it reads it, or refuses it)."""
    return name in dialects.resource_names() or refused(name) is not None
