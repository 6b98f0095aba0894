"""Pods for the webhook tests: a builder, every example pod of seeds 000, 001 and 002, and an
RFC 6902 JSON patch applier to check what /mutate returns."""

from __future__ import annotations

import copy
from typing import Any

from devshare.model.dialects import aliyun, mgpu, nvidia

CORE, MEM, MULTI = mgpu.MGPU_CORE, mgpu.MGPU_MEMORY, mgpu.MGPU_MULTIPLE


def pod(
    *resources: dict[str, Any],
    annotations: dict[str, str] | None = None,
    name: str = "p",
    node_name: str | None = None,
    scheduler: str | None = None,
    limits_too: bool = True,
) -> dict[str, Any]:
    """A v1 Pod with one container per resource map (requests, and limits equal to them)."""
    containers = []
    for i, r in enumerate(resources or ({},)):
        res: dict[str, Any] = {"requests": dict(r)}
        if limits_too:
            res["limits"] = dict(r)
        containers.append({"name": f"c{i}", "image": "cuda:12", "resources": res})
    spec: dict[str, Any] = {"containers": containers}
    if node_name is not None:
        spec["nodeName"] = node_name
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": dict(annotations or {})},
        "spec": spec,
    }


# --- seed 000, "Webhook Admission": every example pod, refused -----------------------------------
# (name, pod, words the refusal must contain)
SEED000_REFUSED = [
    ("normal 1: mgpu-core -20", pod({CORE: "-20", MEM: "6k"}), ["-20"]),
    ("normal 2: share with 128 MiB", pod({CORE: "120", MEM: "128"}), ["128", "256"]),
    ("normal 3: 120 not whole cards", pod({CORE: "120"}), ["120", "multiple of 100"]),
    ("normal 4: whole cards + memory", pod({CORE: "200", MEM: "6k"}), ["200", MEM]),
    ("multiple 1: 2 counts, 1 container", pod({CORE: "200", MEM: "6k"}, annotations={MULTI: "3,2"}), ["3,2"]),
    ("multiple 2: count -1", pod({CORE: "200", MEM: "6k"}, annotations={MULTI: "-1,2"}), ["-1"]),
    ("multiple 3: 200/2 whole + memory", pod({CORE: "200", MEM: "6k"}, annotations={MULTI: "2"}), [MEM]),
    ("multiple 4: 130/3 not whole", pod({CORE: "130", MEM: "6k"}, annotations={MULTI: "3"}), ["130", "3"]),
]

# the same rules, the other side: pods that must pass
SEED000_ALLOWED = [
    ("30% + 1 GiB", pod({CORE: "30", MEM: "1024"})),
    ("two whole cards", pod({CORE: "200"})),
    ("one full card", pod({CORE: "100"})),
    ("2 cards at 50%", pod({CORE: "100", MEM: "1024"}, annotations={MULTI: "2"})),
    ("2,1,3", pod({CORE: "100", MEM: "1024"}, {CORE: "100"}, {CORE: "99", MEM: "3000"}, annotations={MULTI: "2,1,3"})),
]

# more refusals of the multiple-mGPU rules (seed 000, multiple rule 4)
SEED000_MULTI_REFUSED = [
    ("above 100 per card", pod({CORE: "300", MEM: "6000"}, annotations={MULTI: "2"}), ["300"]),
    ("under 256 MiB per card", pod({CORE: "100", MEM: "300"}, annotations={MULTI: "2"}), ["300", "256"]),
    ("zero count", pod({CORE: "50", MEM: "1024"}, annotations={MULTI: "0"}), ["0"]),
    ("not a number", pod({CORE: "50", MEM: "1024"}, annotations={MULTI: "two"}), ["two"]),
]

# --- seed 001, "User apply device resources scenarios" -----------------------------------------
K = "koordinator.sh/"
L = "kubernetes.io/"
NODE = {"cpu": "4", "memory": "8Gi"}
SEED001_ALLOWED = [
    ("nvidia.com/gpu: 2", pod({nvidia.NVIDIA_GPU: "2", **NODE})),
    ("gpu: 50", pod({K + "gpu": "50", **NODE})),
    ("gpu-core 50 + gpu-memory-ratio 60", pod({K + "gpu-core": "50", K + "gpu-memory-ratio": "60", **NODE})),
    ("gpu-core 60 + gpu-memory 4Gi", pod({K + "gpu-core": "60", K + "gpu-memory": "4Gi", **NODE})),
    ("rdma 100", pod({K + "rdma": "100", **NODE})),
    ("whole cards gpu-core 200 + ratio 200", pod({K + "gpu-core": "200", K + "gpu-memory-ratio": "200"})),
    ("legacy kubernetes.io/gpu: 50", pod({L + "gpu": "50", **NODE})),
    ("legacy core + ratio", pod({L + "gpu-core": "50", L + "gpu-memory-ratio": "60"})),
    ("gpu-memory alone (current Koordinator)", pod({K + "gpu-memory": "4Gi", **NODE})),
    ("gpu.shared 2 + ratio 100", pod({K + "gpu.shared": "2", K + "gpu-memory-ratio": "100", **NODE})),
]
SEED001_REFUSED = [
    ("gpu with gpu-core", pod({K + "gpu": "50", K + "gpu-core": "50", K + "gpu-memory-ratio": "50"}), ["gpu-core"]),
    ("gpu-core alone", pod({K + "gpu-core": "50"}), ["memory"]),
    ("gpu-cores misspelled", pod({K + "gpu-cores": "50", K + "gpu-memory": "4Gi"}),
     ["koordinator.sh/gpu-cores", "did you mean koordinator.sh/gpu-core"]),
    ("memory and ratio", pod({K + "gpu-core": "50", K + "gpu-memory": "4Gi", K + "gpu-memory-ratio": "50"}),
     ["gpu-memory-ratio"]),
    ("150: not whole devices", pod({K + "gpu-core": "150", K + "gpu-memory-ratio": "150"}), ["150"]),
    ("counts differ", pod({K + "gpu-core": "200", K + "gpu-memory-ratio": "100"}), ["200", "100"]),
    ("negative core", pod({K + "gpu-core": "-50", K + "gpu-memory-ratio": "50"}), ["-50"]),
    ("not a quantity", pod({K + "gpu": "half"}), ["half"]),
]

# --- seed 002 (Aliyun) -------------------------------------------------------------------------
A_MEM, A_COUNT = aliyun.ALIYUN_GPU_MEM, aliyun.ALIYUN_GPU_COUNT
ALIYUN_ALLOWED = [
    ("gpu-mem 8138", pod({A_MEM: "8138"})),
    ("gpu-mem 4096 on 2 GPUs", pod({A_MEM: "4096", A_COUNT: "2"})),
    ("gpu-count 2 whole", pod({A_COUNT: "2"})),
]
ALIYUN_REFUSED = [
    ("gpu-mem -1", pod({A_MEM: "-1"}), ["-1"]),
    ("gpu-count -1", pod({A_MEM: "1024", A_COUNT: "-1"}), ["-1"]),
    ("gpu-mem not a number", pod({A_MEM: "lots"}), ["lots"]),
]

# --- pod-level refusals ----------------------------------------------------------------------------
POD_REFUSED = [
    ("two dialects in one container",
     pod({nvidia.NVIDIA_GPU: "1", K + "gpu-core": "50", K + "gpu-memory-ratio": "50"}), ["dialect"]),
    ("mGPU and Aliyun in one container", pod({CORE: "50", MEM: "1024", A_MEM: "1024"}), ["dialect"]),
    ("nodeName with a GPU share", pod({K + "gpu": "50"}, node_name="node-1"), ["nodeName", "node-1"]),
    ("nodeName with mGPU", pod({CORE: "30", MEM: "1024"}, node_name="node-2"), ["nodeName"]),
]


# --- RFC 6902 (add / remove / replace), to apply what /mutate returns ---------------------------


def _tokens(path: str) -> list[str]:
    assert path.startswith("/"), path
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def apply_patch(doc: Any, ops: list[dict[str, Any]]) -> Any:
    """Apply JSON patch ``ops`` to a copy of ``doc``; raises on an operation that does not apply."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = _tokens(op["path"])
        target = doc
        for t in parents:
            target = target[int(t)] if isinstance(target, list) else target[t]
        kind = op["op"]
        if isinstance(target, list):
            index = len(target) if last == "-" else int(last)
            if kind == "add":
                target.insert(index, copy.deepcopy(op["value"]))
            elif kind == "remove":
                del target[index]
            elif kind == "replace":
                target[index] = copy.deepcopy(op["value"])
            else:
                raise ValueError(f"unsupported op {kind}")
        elif isinstance(target, dict):
            if kind == "add":
                target[last] = copy.deepcopy(op["value"])
            elif kind == "remove":
                del target[last]
            elif kind == "replace":
                if last not in target:
                    raise KeyError(last)
                target[last] = copy.deepcopy(op["value"])
            else:
                raise ValueError(f"unsupported op {kind}")
        else:
            raise TypeError(f"cannot apply {op} to a {type(target).__name__}")
    return doc


class StaticPods:
    """Pods given up front (tests)."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next((p for p in self.pods if (p.get("metadata") or {}).get("namespace") == namespace
                     and (p.get("metadata") or {}).get("name") == name), None)

    async def list_node_pods(self, namespace: str, node: str) -> list[dict[str, Any]]:
        return [p for p in self.pods if (p.get("metadata") or {}).get("namespace") == namespace
                and (p.get("spec") or {}).get("nodeName") == node]
