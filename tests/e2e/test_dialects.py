"""Every request dialect, placed by the real kube-scheduler through devshare's filter/prioritize/bind,
carries the canonical allocation and its dialect's annotations."""

from __future__ import annotations

import json
import time
from collections import Counter

from e2e.conftest import Cluster, allocation

GiB = 2**30


def test_koordinator_share_gets_canonical_and_koordinator_annotations(cluster: Cluster) -> None:
    node = cluster.node("koord-1", gpus=2)
    cluster.pod("koord", {"koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory": "6Gi"})
    pod = cluster.wait_bound("koord")
    assert pod["spec"]["nodeName"] == node
    alloc = allocation(pod)
    assert alloc["node"] == node
    (dev,) = alloc["containers"][0]["devices"]
    assert (dev["type"], dev["core"], dev["memory"]) == ("gpu", 30, 6 * GiB)
    koord = json.loads(pod["metadata"]["annotations"]["scheduling.koordinator.sh/device-allocated"])
    assert koord["gpu"][0]["minor"] == dev["minor"]


def test_nvidia_whole_gpus(cluster: Cluster) -> None:
    node = cluster.node("nvidia-1", gpus=4)
    cluster.pod("whole", {"nvidia.com/gpu": "2"})
    alloc = allocation(cluster.wait_bound("whole"))
    devs = alloc["containers"][0]["devices"]
    assert alloc["node"] == node
    assert len(devs) == 2 and all(d["core"] == 100 for d in devs)
    assert len({d["minor"] for d in devs}) == 2


def test_mgpu_multiple_gpu_containers_2_1_3(cluster: Cluster) -> None:
    cluster.node("mgpu-1", gpus=8, labels={"devshare.io/multi-gpu-share": "true",
                                           "devshare.io/gpu-compute-policy": "native-burst-share"})
    cluster.pod("mgpu", [{"vke.volcengine.com/mgpu-core": "100", "vke.volcengine.com/mgpu-memory": "2048"},
                         {"vke.volcengine.com/mgpu-core": "100"},
                         {"vke.volcengine.com/mgpu-core": "99", "vke.volcengine.com/mgpu-memory": "3072"}],
                annotations={"vke.volcengine.com/container-multiple-gpu": "2,1,3",
                             "devshare.io/gpu-compute-policy": "native-burst-share"})
    pod = cluster.wait_bound("mgpu")
    ann = pod["metadata"]["annotations"]
    counts = [len(c["devices"]) for c in allocation(pod)["containers"]]
    assert counts == [2, 1, 3]
    assert ann["vke.volcengine.com/assumed"] == "true"
    for i, n in enumerate(counts):
        assert len(ann[f"vke.volcengine.com/gpu-index-container-c{i}"].split(",")) == n


def test_aliyun_gpu_mem(cluster: Cluster) -> None:
    cluster.node("aliyun-1", gpus=2)
    cluster.pod("aliyun", {"aliyun.com/gpu-mem": "8138"})
    pod = cluster.wait_bound("aliyun")
    ann = pod["metadata"]["annotations"]
    (dev,) = allocation(pod)["containers"][0]["devices"]
    assert dev["memory"] == 8138 * 2**20
    assert ann["ALIYUN_COM_GPU_MEM_IDX"] == str(dev["minor"])
    assert ann["ALIYUN_COM_GPU_MEM_POD"] == "8138"
    assert ann["ALIYUN_COM_GPU_MEM_ASSIGNED"] == "false"
    assert "ALIYUN_COM_GPU_MEM_DEV" in ann and "ALIYUN_COM_GPU_MEM_ASSUME_TIME" in ann


def test_rdma_and_fpga_shares(cluster: Cluster) -> None:
    cluster.node("rdma-1", gpus=1, rdma=2, fpga=1)
    cluster.pod("rdma", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50",
                         "koordinator.sh/rdma": "50", "koordinator.sh/fpga": "100"})
    devs = allocation(cluster.wait_bound("rdma"))["containers"][0]["devices"]
    by_type = Counter(d["type"] for d in devs)
    assert by_type == {"gpu": 1, "rdma": 1, "fpga": 1}
    assert next(d for d in devs if d["type"] == "rdma")["share"] == 50


def test_eight_halves_fill_exactly_four_cards_and_the_ninth_stays_pending(cluster: Cluster) -> None:
    cluster.node("halves-1", gpus=4)
    for i in range(8):
        cluster.pod(f"half-{i}", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"})
    allocs = [allocation(cluster.wait_bound(f"half-{i}")) for i in range(8)]
    per_card = Counter(a["containers"][0]["devices"][0]["minor"] for a in allocs)
    assert per_card == {0: 2, 1: 2, 2: 2, 3: 2}
    cluster.pod("half-8", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"})
    cluster.wait_event("half-8", "FailedScheduling")
    time.sleep(1)
    assert not cluster.get_pod("half-8")["spec"].get("nodeName")
    used = [d["used"] for n in cluster.inspect()["nodes"] for d in n["devices"] if d["type"] == "gpu"]
    assert len(used) == 4


def test_aliyun_gpu_count_two_on_an_ordinary_node(cluster: Cluster) -> None:
    """Seed 002's gpu-count: N cards with gpu-mem each, on a node without mGPU's labels (issue 13)."""
    cluster.node("aliyun-2", gpus=2)
    cluster.pod("pair", {"aliyun.com/gpu-mem": "4096", "aliyun.com/gpu-count": "2"})
    pod = cluster.wait_bound("pair")
    devs = allocation(pod)["containers"][0]["devices"]
    assert sorted(d["minor"] for d in devs) == [0, 1] and all(d["memory"] == 4096 * 2**20 for d in devs)
    assert sorted(pod["metadata"]["annotations"]["ALIYUN_COM_GPU_MEM_IDX"].split(",")) == ["0", "1"]
