"""What a pod asks of its node (CPU and memory as kube-scheduler counts them) and the quick look at
its resource names that lets every pod asking no device through untouched."""

from __future__ import annotations

from typing import Any

from devshare.model.dialects import aliyun, mgpu, nvidia
from devshare.model.dialects.koordinator_names import KOORD_GPU
from devshare.model.pod import parse_pod
from devshare.model.podresources import pod_node_requests, requests_devices

GPU50 = {KOORD_GPU: "50"}


def pod(*resources: dict[str, Any], annotations: dict[str, Any] | None = None) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "resources": {"requests": dict(r)}} for i, r in enumerate(resources)]
    meta: dict[str, Any] = {"name": "p", "namespace": "team", "annotations": annotations or {}}
    return {"metadata": meta, "spec": {"containers": containers}}


def test_cpu_and_memory_as_kube_scheduler_counts_them() -> None:
    """component-helpers' PodRequests: sidecars (restartable init containers) add to the app containers
    and to each init container after them; pod-level requests replace the sum; overhead adds."""
    p = pod({"cpu": "1", "memory": "1Gi"})
    p["spec"]["initContainers"] = [
        {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        {"name": "setup", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
    ]
    # app + sidecar = 1.5 cores, 2 GiB; setup runs beside the sidecar: 2.5 cores, 2 GiB
    assert (parse_pod(p).cpu_milli, parse_pod(p).memory_bytes) == (2500, 2 * 2**30)
    assert pod_node_requests(p) == (2500, 2 * 2**30)
    p["spec"]["overhead"] = {"cpu": "100m", "memory": "64Mi"}
    assert pod_node_requests(p) == (2600, 2 * 2**30 + 64 * 2**20)
    p["spec"]["resources"] = {"requests": {"cpu": "8"}}  # pod-level: CPU replaced, memory kept
    assert pod_node_requests(p) == (8100, 2 * 2**30 + 64 * 2**20)
    assert pod_node_requests({"spec": "broken"}) == (0, 0)


def test_requests_devices() -> None:
    assert requests_devices(pod(GPU50))
    assert requests_devices(pod({"kubernetes.io/gpu-core": "50"}))
    assert requests_devices(pod({mgpu.MGPU_CORE: "50"}))
    assert requests_devices(pod({aliyun.ALIYUN_GPU_MEM: 100}))
    assert not requests_devices(pod({"cpu": "1", "memory": "1Gi"}))
    assert not requests_devices(pod({nvidia.NVIDIA_GPU: "0"}))
    assert not requests_devices(pod({"cpu": "1"}, annotations={mgpu.MGPU_MULTIPLE: "2"}))
    p = pod({"cpu": "1"})
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"limits": {nvidia.NVIDIA_GPU: 1}}}]
    assert requests_devices(p)
    for garbage in (None, [], "pod", {"spec": []}, {"spec": {"containers": [None, {"resources": 3}]}}):
        assert not requests_devices(garbage)
