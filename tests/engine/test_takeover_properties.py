"""The takeover's invariant, property-based (issue 36): for any mix of pods other schedulers placed
(HAMi, Koordinator, Volcano vGPU and gpushare, Aliyun, mGPU: their own annotations, some over-booking
or naming cards devshare does not know) and pods devshare placed beside them, the state rebuilt from
the annotations alone never oversubscribes a card through devshare's placements, never frees a card
a live pod holds, and equals the state that followed the changes as they came."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devshare.engine.state import ClusterState
from devshare.kube.memory import MemoryBackend
from devshare.model.annotations import encode_annotations
from devshare.model.pod import parse_pod
from support.kube import Following

MiB = 2**20
CARD_MIB = 16384
UUIDS = [f"GPU-card-{i}" for i in range(3)]


def inventory(kind: str) -> list[dict[str, Any]]:
    nodeobj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "annotations": {}},
                               "status": {"allocatable": {"cpu": "64", "memory": "256Gi"}}}
    if kind == "hami":
        nodeobj["metadata"]["annotations"]["hami.io/node-nvidia-register"] = json.dumps(
            [{"id": u, "index": i, "count": 10, "devmem": CARD_MIB, "devcore": 100, "type": "NVIDIA A10",
              "health": True} for i, u in enumerate(UUIDS)])
        return [nodeobj]
    dev = {"apiVersion": "devshare.io/v1alpha1", "kind": "Device", "metadata": {"name": "n"},
           "spec": {"devices": [{"type": "gpu", "minor": i, "id": u, "health": True,
                                 "resources": {"koordinator.sh/gpu-core": "100",
                                               "koordinator.sh/gpu-memory": f"{CARD_MIB}Mi"}}
                                for i, u in enumerate(UUIDS)]}}
    return [nodeobj, dev]


def peer_pod(i: int, who: str, card: int, core: int, mib: int) -> tuple[dict[str, Any], tuple[int, int, int]]:
    """A pod ``who`` placed on ``card`` (index; 9: a card devshare does not know), holding ``core``
    percent and ``mib``; and what it holds per the truth (card, thousandths, bytes)."""
    uuid = UUIDS[card] if card < len(UUIDS) else "GPU-unknown"
    ann: dict[str, str]
    limits: dict[str, str]
    if who == "hami":
        ann = {"hami.io/vgpu-node": "n", "hami.io/vgpu-devices-allocated": f"{uuid},NVIDIA,{mib},{core}:;"}
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mib), "nvidia.com/gpucores": str(core)}
    elif who == "koordinator":
        ann = {"scheduling.koordinator.sh/device-allocated": json.dumps({"gpu": [{"minor": card, "resources": {
            "koordinator.sh/gpu-core": str(core), "koordinator.sh/gpu-memory": f"{mib}Mi"}}]})}
        limits = {"koordinator.sh/gpu-core": str(core), "koordinator.sh/gpu-memory": f"{mib}Mi"}
    elif who == "volcano-vgpu":
        ann = {"volcano.sh/vgpu-node": "n", "volcano.sh/vgpu-ids-new": f"{uuid},NVIDIA,{mib},{core}:"}
        limits = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(mib), "volcano.sh/vgpu-cores": str(core)}
    elif who == "volcano-gpushare":
        ann, limits, core = {"volcano.sh/gpu-index": str(card)}, {"volcano.sh/gpu-memory": str(mib)}, 0
    elif who == "aliyun":
        ann = {"ALIYUN_COM_GPU_MEM_IDX": str(card), "ALIYUN_COM_GPU_MEM_POD": str(mib),
               "ALIYUN_COM_GPU_MEM_DEV": str(CARD_MIB)}
        limits, core = {"aliyun.com/gpu-mem": str(mib)}, 0
    else:  # mgpu
        ann = {"vke.volcengine.com/gpu-index-container-main": str(card), "vke.volcengine.com/assumed": "true"}
        limits = {"vke.volcengine.com/mgpu-core": str(max(core, 1)), "vke.volcengine.com/mgpu-memory": str(mib)}
        core = max(core, 1)
    obj = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"peer-{i}", "namespace": "default", "uid": f"uid-peer-{i}", "annotations": ann,
                        "creationTimestamp": f"2026-01-01T00:00:{i:02d}Z"},
           "spec": {"nodeName": "n", "containers": [{"name": "main", "resources": {"limits": limits}}]},
           "status": {"phase": "Running"}}
    return obj, (card, core * 10, mib * MiB)


NEW = [{"koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory": "4Gi"},
       {"nvidia.com/gpu": "1"},
       {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "6000", "nvidia.com/gpucores": "20"},
       {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "3000", "volcano.sh/vgpu-cores": "40"},
       {"volcano.sh/gpu-memory": "5000"},
       {"aliyun.com/gpu-mem": "2000"},
       {"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "60", "koordinator.sh/gpu-memory-ratio": "40"}]


def rebuilt(objects: list[dict[str, Any]]) -> Following:
    """The objects listed into a fresh state, as at start."""
    mb = MemoryBackend.from_objects(objects)
    return Following(mb).listed(mb)


def per_card(state: ClusterState, keys: set[str] | None = None) -> dict[int, list[int]]:
    """Per card: compute and memory counted (of the records ``keys``, or all)."""
    out: dict[int, list[int]] = {}
    for key, rec in state.pods.items():
        if keys is not None and key not in keys:
            continue
        for u in rec.allocation.usage():
            acc = out.setdefault(u.minor, [0, 0])
            acc[0] += u.core_milli
            acc[1] += u.memory
    return out


peers = st.lists(st.tuples(st.sampled_from(["hami", "koordinator", "volcano-vgpu", "volcano-gpushare", "aliyun",
                                            "mgpu"]),
                           st.sampled_from([0, 0, 1, 1, 2, 9]), st.sampled_from([0, 10, 30, 60, 100]),
                           st.sampled_from([1000, 4000, 9000, 16384, 20000])), max_size=7)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(["devshare", "hami"]), placed=peers,
       new=st.lists(st.sampled_from(range(len(NEW))), max_size=8), gone=st.lists(st.integers(0, 20), max_size=4))
def test_rebuilt_state_never_oversubscribes_nor_frees_a_held_card(kind: str, placed: list[tuple[str, int, int, int]],
                                                                   new: list[int], gone: list[int]) -> None:
    objects = inventory(kind)
    truth: dict[str, tuple[int, int, int]] = {}
    for i, (who, card, core, mib) in enumerate(placed):
        obj, held = peer_pod(i, who, card, core, mib)
        objects.append(obj)
        truth[f"default/peer-{i}"] = held
    followed = rebuilt(objects)
    state, lifecycle = followed.state, followed.lifecycle
    peer_keys = set(state.pods)
    before = per_card(state)
    sched = lifecycle.scheduler
    mine: dict[str, Any] = {}
    for j, a in enumerate(new):
        obj = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"new-{j}", "namespace": "default", "uid": f"uid-new-{j}",
                            "creationTimestamp": f"2026-01-02T00:00:{j:02d}Z"},
               "spec": {"containers": [{"name": "main", "resources": {"limits": NEW[a]}}]}}
        pod = parse_pod(obj)
        placement = sched.place(pod)
        if placement is None:
            continue
        lifecycle.assume(pod, placement.allocation, now=0.0)
        lifecycle.confirm(pod, placement.allocation)
        obj["metadata"]["annotations"] = encode_annotations(pod, placement.allocation, now_ns=1,
                                                            device_memory=state.gpu_memory("n"))
        obj["spec"]["nodeName"] = "n"
        obj["status"] = {"phase": "Running"}
        objects.append(obj)
        mine[pod.key] = placement.allocation
    # devshare never takes more of a card than it has left beside the peers' pods
    table, row = state.tables["gpu"], state.row_of["n"]
    total = {int(m): (int(c), int(t)) for m, c, t in zip(
        table.minor[row].tolist(), table.total_core[row].tolist(), table.total_mem[row].tolist(), strict=True)
        if m >= 0}
    ours = per_card(state, set(mine))
    for minor, (core, mem) in ours.items():
        was = before.get(minor, [0, 0])
        assert was[0] + core <= max(total[minor][0], was[0]) and (core == 0 or was[0] + core <= total[minor][0])
        assert was[1] + mem <= max(total[minor][1], was[1]) and (mem == 0 or was[1] + mem <= total[minor][1])
    # some pods go; the state rebuilt from what is left holds every card a live pod holds
    names = [o["metadata"]["name"] for o in objects if o["kind"] == "Pod"]
    dead = {f"default/{names[g % len(names)]}" for g in gone} if names else set()
    left = [o for o in objects if o["kind"] != "Pod" or f"default/{o['metadata']['name']}" not in dead]
    again = rebuilt(left).state
    counted = per_card(again)
    for key, (card, core, mem) in truth.items():
        if key in dead:
            continue
        if card >= len(UUIDS):  # a card devshare does not know: the node's cards count as held
            assert all(counted.get(m, [0, 0])[0] >= total[m][0] for m in total) or kind == "devshare"
            continue
        assert counted.get(card, [0, 0])[0] >= core and counted.get(card, [0, 0])[1] >= min(mem, total[card][1])
    for key, alloc in mine.items():
        if key in dead:
            continue
        for u in alloc.usage():
            assert counted[u.minor][0] >= u.core_milli and counted[u.minor][1] >= u.memory
    # the rebuilt state equals the one that followed the changes
    for key in dead:
        lifecycle.release(key)
    assert per_card(again) == per_card(state)
    assert set(again.pods) == {k for k in set(state.pods) | peer_keys if k not in dead}
