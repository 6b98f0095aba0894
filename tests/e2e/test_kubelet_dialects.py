"""Pods of every dialect the agent serves, on one node, admitted by kubelet's own device manager
through devshare's agent: Koordinator (compute with a memory ratio, or with bytes: the bytes are no
device-plugin resource, only the compute reaches kubelet), NVIDIA whole GPUs, mGPU (one container over
two shared cards), Aliyun (gpu-mem, one id per MiB, and gpu-count), and an RDMA share with its device
file. Each container gets what docs/agent.md promises for its final annotation; kubelet records ids of
its own devices."""

from __future__ import annotations

from pathlib import Path

from e2e.conftest import Cluster
from e2e.kubelet import NodeSide, check_containers

GIB = 2**30


def test_every_dialect(cluster: Cluster, tmp_path: Path) -> None:
    side = NodeSide(cluster, tmp_path, "dialects-1", gpus=4, memory_gib=4, rdma=1,
                    labels={"devshare.io/multi-gpu-share": "true",
                            "devshare.io/gpu-compute-policy": "native-burst-share"})
    try:
        side.start({"koordinator.sh/gpu-core": 400, "nvidia.com/gpu": 4, "aliyun.com/gpu-mem": 4 * 4096,
                    "vke.volcengine.com/mgpu-core": 400, "koordinator.sh/rdma": 100})
        pods = {
            "koord-ratio": ({"koordinator.sh/gpu-core": "25", "koordinator.sh/gpu-memory-ratio": "25",
                             "koordinator.sh/rdma": "50"}, {}),
            "koord-bytes": ({"koordinator.sh/gpu-core": "25", "koordinator.sh/gpu-memory": "1Gi"}, {}),
            "nvidia": ({"nvidia.com/gpu": "1"}, {}),
            "mgpu": ({"vke.volcengine.com/mgpu-core": "100", "vke.volcengine.com/mgpu-memory": "1024"},
                     {"vke.volcengine.com/container-multiple-gpu": "2",
                      "devshare.io/gpu-compute-policy": "native-burst-share"}),
            "aliyun": ({"aliyun.com/gpu-mem": "1000"}, {}),
            "aliyun-pair": ({"aliyun.com/gpu-mem": "512", "aliyun.com/gpu-count": "2"}, {}),
        }
        results = {}
        # kubelet admits each pod as it arrives (bound). Pods that differ but ask the same amount of the
        # resource kubelet happens to allocate first (Go map order) cannot be told apart while both wait:
        # test_kubelet_replicas.py checks that refusal
        for name, (ask, annotations) in pods.items():
            cluster.pod(name, ask, annotations=annotations)
            cluster.wait_bound(name, timeout=60)
            results[name] = side.admit(name)
        got = check_containers(side, list(pods), results, card_memory=4 * GIB)
        envs = {n: r["containers"][0]["envs"] for n, r in results.items()}
        assert envs["koord-ratio"]["DEVSHARE_RDMA_DEVICES"] == "mlx5_0"
        assert results["koord-ratio"]["containers"][0]["deviceFiles"] == [
            {"containerPath": "/dev/infiniband/uverbs0", "hostPath": "/dev/infiniband/uverbs0", "permissions": "rw"}]
        assert "DEVSHARE_GPU_MEMORY_LIMIT" not in envs["nvidia"]  # a whole card: no limits
        assert len(envs["mgpu"]["NVIDIA_VISIBLE_DEVICES"].split(",")) == 2
        assert envs["aliyun"]["ALIYUN_COM_GPU_MEM_CONTAINER"] == "1000"
        assert got["aliyun"]["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_ASSIGNED"] == "true"
        assert len(envs["aliyun-pair"]["ALIYUN_COM_GPU_MEM_IDX"].split(",")) == 2
        # koordinator.sh/gpu-memory is advertised in the node status, not served: kubelet allocates only the compute
        assert set(results["koord-bytes"]["containers"][0]["devices"]) == {"koordinator.sh/gpu-core"}
    finally:
        side.close()
