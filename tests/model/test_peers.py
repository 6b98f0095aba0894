"""Pods other schedulers placed, counted from their own annotations (issue 36). The clusters in
tests/fixtures/peers/ carry each peer's annotations and inventories exactly as its code writes them
(each file's header names the upstream file and commit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from devshare.model import peers
from devshare.model.device import DeviceInfo, NodeDevices, parse_device
from devshare.model.inventory import capacity_devices, hami_register, koordinator_device, volcano_register
from devshare.model.quantity import MIB

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "peers"
GiB = 2**30


def cluster(name: str) -> tuple[dict[str, NodeDevices], dict[str, dict[str, Any]]]:
    """Each node's inventory as the peer reports it, and the pods by name."""
    docs = [d for d in yaml.safe_load_all((FIXTURES / f"{name}.yaml").read_text()) if d]
    inv: dict[str, NodeDevices] = {}
    for d in docs:
        if d["kind"] == "Node":
            for reader in (hami_register, volcano_register, capacity_devices):
                nd = reader(d)
                if nd is not None:
                    inv.setdefault(d["metadata"]["name"], nd)
        elif d["kind"] == "Device":
            nd = koordinator_device(d) if d["apiVersion"].startswith("scheduling.koordinator.sh") else parse_device(d)
            inv[nd.node] = nd
    return inv, {d["metadata"]["name"]: d for d in docs if d["kind"] == "Pod"}


def held(name: str, pod: str) -> tuple[peers.PeerAllocation, list[tuple[int, int, int, int]]]:
    """(the reading, per card (minor, compute thousandths, memory bytes, containers))."""
    inv, pods = cluster(name)
    obj = pods[pod]
    node = obj["spec"]["nodeName"]
    got = peers.read(obj, node, inv[node])
    assert got is not None
    return got, [(u.minor, u.core_milli, u.memory, u.slots) for u in got.allocation.usage()]


def test_hami_pods() -> None:
    r, cards = held("hami", "hami-train")
    assert (r.dialect, r.problems) == ("hami", ()) and cards == [(0, 300, 10000 * MIB, 1)]
    # an init container's devices are handed on: the pod holds max(init, apps) on the card
    r, cards = held("hami", "hami-init")
    assert cards == [(1, 500, 20000 * MIB, 1)]
    assert {c.name: c.init for c in r.allocation.containers} == {"warmup": True, "main": False}
    r, cards = held("hami", "hami-pair")  # the older node register, two vGPUs
    assert cards == [(0, 0, 4000 * MIB, 1), (1, 0, 4000 * MIB, 1)]
    r, cards = held("hami", "hami-whole")  # bind-phase allocating: counted all the same
    assert cards == [(0, 1000, 24576 * MIB, 1)]


def test_koordinator_pods_seed_era_and_current() -> None:
    r, cards = held("koordinator", "koord-seed")  # minors only, kubernetes.io/ names
    assert (r.dialect, r.problems) == ("koordinator", ()) and cards == [(0, 500, 20 * GiB, 1)]
    r, cards = held("koordinator", "koord-now")  # an id beside each minor, and an RDMA share
    assert cards == [(1, 300, 12 * GiB, 1), (0, 500, 0, 1)]
    assert {g.type for _, g in r.allocation.grants()} == {"gpu", "rdma"}
    r, cards = held("koordinator", "koord-shared")  # gpu.shared: memory without compute
    assert cards == [(0, 0, 20 * GiB, 1), (1, 0, 20 * GiB, 1)]
    r, cards = held("koordinator", "koord-old")  # ratio only, on the seed era's Device (kubernetes.io/ names)
    assert cards == [(0, 250, 15472384 * 1024 // 4, 1)]


def test_volcano_and_aliyun_pods() -> None:
    r, cards = held("volcano", "vc-infer")
    assert (r.dialect, r.problems) == ("volcano-vgpu", ()) and cards == [(0, 250, 8000 * MIB, 1)]
    r, cards = held("volcano", "vc-share")
    assert r.dialect == "volcano-gpushare" and cards == [(0, 0, 10240 * MIB, 1)]
    r, cards = held("aliyun", "ali-infer")  # POD of DEV on the card IDX names
    assert (r.dialect, r.problems) == ("aliyun", ()) and cards == [(1, 0, 32 * GiB * 250 // 1000, 1)]


def test_mgpu_pods_by_index_and_by_id() -> None:
    nd = NodeDevices(node="n", devices=tuple(DeviceInfo(type="gpu", minor=i, id=f"GPU-{i}", memory=16 * GiB)
                                             for i in range(4)))
    obj = {"metadata": {"name": "m", "annotations": {"vke.volcengine.com/gpu-index-container-a": "1,2",
                                                       "vke.volcengine.com/gpu-index-container-b": "GPU-3",
                                                       "vke.volcengine.com/assumed": "true"}},
           "spec": {"containers": [
               {"name": "a", "resources": {"limits": {"vke.volcengine.com/mgpu-core": "100",
                                                      "vke.volcengine.com/mgpu-memory": "4096"}}},
               {"name": "b", "resources": {"limits": {"vke.volcengine.com/mgpu-core": "100"}}}]}}
    r = peers.read(obj, "n", nd)
    assert r is not None and r.problems == ()
    assert [(u.minor, u.core_milli, u.memory) for u in r.allocation.usage()] == [
        (1, 500, 2048 * MIB), (2, 500, 2048 * MIB), (3, 1000, 16 * GiB)]


NODE = NodeDevices(node="n", devices=(DeviceInfo(type="gpu", minor=0, id="GPU-0", memory=16 * GiB),
                                      DeviceInfo(type="gpu", minor=1, id="GPU-1", memory=16 * GiB)))


def koord(text: str) -> dict[str, Any]:
    return {"metadata": {"name": "k", "annotations": {"scheduling.koordinator.sh/device-allocated": text}},
            "spec": {"containers": [{"name": "main"}]}}


def hami(text: str) -> dict[str, Any]:
    return {"metadata": {"name": "h", "annotations": {"hami.io/vgpu-devices-allocated": text}},
            "spec": {"containers": [{"name": "main"}]}}


FULL = (1000, 16 * GiB)


@pytest.mark.parametrize(("title", "obj", "cards", "words"), [
    ("a card devshare does not know: every card of the type held",
     hami("GPU-ffff,NVIDIA,1000,10:;"), {0: FULL, 1: FULL}, ["GPU-ffff", "not a device devshare knows"]),
    ("a minor the node lacks", koord('{"gpu":[{"minor":7,"resources":{"koordinator.sh/gpu-core":"10",'
                                     '"koordinator.sh/gpu-memory-ratio":"10"}}]}'),
     {0: FULL, 1: FULL}, ["gpu 7", "not a device"]),
    ("more memory than the card", hami("GPU-1,NVIDIA,99999,10:;"), {1: FULL}, ["more than it has"]),
    ("more compute than the card",
     koord('{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"250","koordinator.sh/gpu-memory-ratio":"10"}}]}'),
     {0: FULL}, ["more than it has"]),
    ("a negative share", koord('{"gpu":[{"minor":0,"resources":{"koordinator.sh/gpu-core":"-50",'
                               '"koordinator.sh/gpu-memory-ratio":"10"}}]}'), {0: FULL}, ["below 0"]),
    ("an absurd ratio", koord('{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"10",'
                              '"koordinator.sh/gpu-memory-ratio":"5000"}}]}'), {1: FULL}, ["more than all of it"]),
    ("no amounts at all", koord('{"gpu":[{"minor":1}]}'), {1: FULL}, ["gives no amounts"]),
    ("not JSON", koord('{"gpu": [oops'), {0: FULL, 1: FULL}, ["not JSON"]),
    ("not HAMi's list", hami("nonsense"), {0: FULL, 1: FULL}, ["UUID,TYPE,MEMORY,CORES"]),
    ("a malformed number", hami("GPU-0,NVIDIA,-3,10:;"), {0: FULL, 1: FULL}, ["whole numbers"]),
])
def test_bad_input_is_counted_conservatively_and_said(title: str, obj: dict[str, Any],
                                                       cards: dict[int, tuple[int, int]], words: list[str]) -> None:
    r = peers.read(obj, "n", NODE)
    assert r is not None, title
    got = {u.minor: (u.core_milli, u.memory) for u in r.allocation.usage()}
    assert {m: v for m, v in got.items() if v == FULL} == cards, title
    text = " ".join(r.problems)
    assert all(w in text for w in words), (title, r.problems)


def test_a_node_without_inventory_waits_and_a_wrong_node_is_said() -> None:
    obj = hami("GPU-1,NVIDIA,1000,10:;")
    r = peers.read(obj, "n", None)
    assert r is not None and r.waiting and r.allocation.grants() == []
    obj["metadata"]["annotations"]["hami.io/vgpu-node"] = "elsewhere"
    r = peers.read(obj, "n", NODE)
    assert r is not None and "name node elsewhere, but it is bound to n" in r.problems[0]
    assert [(u.minor, u.core_milli) for u in r.allocation.usage()] == [(1, 100)]


def test_two_peers_records_of_one_pod_merge_by_the_larger_amount() -> None:
    obj = hami("GPU-1,NVIDIA,4096,30:;")
    obj["metadata"]["annotations"]["scheduling.koordinator.sh/device-allocated"] = (
        '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"20","koordinator.sh/gpu-memory":"8Gi"}}]}')
    r = peers.read(obj, "n", NODE)
    assert r is not None and r.dialect == "koordinator+hami"
    assert [(u.minor, u.core_milli, u.memory) for u in r.allocation.usage()] == [(1, 300, 8 * GiB)]


def test_a_pod_no_peer_placed_is_none_of_theirs() -> None:
    assert peers.read({"metadata": {"name": "x", "annotations": {"a": "b"}}, "spec": {}}, "n", NODE) is None
    assert peers.read({"metadata": {"name": "x"}}, "n", NODE) is None
