"""Taking over, as the watch shows it (engine/takeover.py, fed by engine/watched.py; issue 36): pods
other schedulers placed are counted at the list and on every event, matched again when their node's
inventory changes, released when they finish; a node with only a peer's inventory is scheduled;
Koordinator's Device kind is optional."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from devshare.engine.state import ClusterState
from devshare.kube.memory import MemoryBackend
from devshare.kube.rest import KubeClient
from fakeapi.server import FakeApiServer
from support.kube import device, following, node
from support.waiting import eventually

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "peers"
GiB, MiB = 2**30, 2**20


def used(state: ClusterState, node_name: str) -> list[tuple[int, float, int]]:
    n = next(n for n in state.inspect()["nodes"] if n["name"] == node_name)
    return [(d["minor"], d["used"]["core"], d["used"]["memory"]) for d in n["devices"] if d["type"] == "gpu"]


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FIXTURES / f"{name}.yaml").read_text()) if d]


async def test_every_peers_pods_are_counted_at_the_list() -> None:
    for name, node_name, want in [
        ("hami", "hami-1", [(0, 30.0, 10000 * MiB), (1, 50.0, 20000 * MiB)]),
        ("koordinator", "koord-1", [(0, 50.0, 40 * GiB), (1, 30.0, 32 * GiB), (2, 100.0, 40 * GiB), (3, 0.0, 0)]),
        ("volcano", "vc-1", [(0, 25.0, 28000 * MiB), (1, 0.0, 20000 * MiB)]),
        ("aliyun", "ali-1", [(0, 0.0, 32 * GiB * 916 // 1000), (1, 0.0, 8 * GiB)]),
    ]:
        async with following(MemoryBackend.load(FIXTURES / f"{name}.yaml")) as sync:
            assert used(sync.state, node_name) == want, name
            peers = sync.state.inspect()["placedByPeers"]
            assert peers and all(p["problems"] == [] for p in peers), name


async def test_a_peers_pod_arriving_changing_and_finishing() -> None:
    mb = MemoryBackend.load(FIXTURES / "hami.yaml")
    async with following(mb) as sync:
        pod = copy.deepcopy(next(d for d in docs("hami") if d["metadata"]["name"] == "hami-train"))
        pod["metadata"]["name"] = "late"
        pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = (
            "GPU-0c6c4e6b-7a1b-3f47-9d1d-2b54c8ff9e01,NVIDIA,5000,20:;")
        mb.apply(pod)
        await eventually(lambda: used(sync.state, "hami-1")[0] == (0, 50.0, 15000 * MiB))
        pod["status"] = {"phase": "Succeeded"}
        mb.apply(pod)
        await eventually(lambda: used(sync.state, "hami-1")[0] == (0, 30.0, 10000 * MiB))
        mb.delete("pods", "team-a/hami-train")
        await eventually(lambda: used(sync.state, "hami-1")[0] == (0, 0.0, 0))
        assert "team-a/hami-train" not in sync.cluster.peer_pods.node_of


async def test_the_inventory_arriving_later_counts_the_pods_then() -> None:
    objs = docs("koordinator")
    koord = [d for d in objs if d["kind"] == "Device"]
    mb = MemoryBackend.from_objects([d for d in objs if d["kind"] != "Device"])
    async with following(mb) as sync:
        assert "koord-1" not in sync.state.devices
        assert any("no inventory yet" in p for p in sync.state.pods["team-a/koord-seed"].problems)
        for d in koord:
            mb.apply(d)
        await eventually(lambda: used(sync.state, "koord-1")[:1] == [(0, 50.0, 40 * GiB)])
        assert sync.state.pods["team-a/koord-seed"].problems == ()
        # a devshare Device comes to the node: it wins, the pods are matched against it
        mb.apply(device("koord-1", gpus=2, memory_gib=80))
        await eventually(lambda: sync.cluster.inventories.chosen.get("koord-1") == "devshare")
        assert len(used(sync.state, "koord-1")) == 2, (sync.state.devices.get("koord-1"), sync.state.inspect())
        # the Koordinator Device goes: nothing changes while devshare's stays
        mb.delete("koorddevices", "koord-1")
        await eventually(lambda: "koordinator" not in {s for s, d in sync.cluster.inventories.sources["koord-1"].items()
                                                       if d is not None})
        assert sync.cluster.inventories.chosen["koord-1"] == "devshare"


async def test_hamis_node_register_alone_makes_a_node_schedulable_and_a_bad_one_is_skipped() -> None:
    n = next(d for d in docs("hami") if d["metadata"]["name"] == "hami-3")
    mb = MemoryBackend.from_objects([n])
    async with following(mb) as sync:
        assert [d.id for d in sync.state.devices["hami-3"].devices] == [
            "GPU-5e9b8a11-2c4d-4e6f-8a9b-0c1d2e3f4a5b", "GPU-6f0c9b22-3d5e-4f70-9bac-1d2e3f4a5b6c"]
        bad = copy.deepcopy(n)
        bad["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "[not json"
        mb.apply(bad)
        await eventually(lambda: "hami-3" not in sync.state.devices)
        assert ("hami-3", "hami") in sync.cluster.inventories.problems


async def test_a_malformed_devshare_allocation_falls_back_to_its_dialects_annotation() -> None:
    mb = MemoryBackend.from_objects([node("n1"), device("n1", gpus=2)])
    async with following(mb) as sync:
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": "k", "namespace": "default", "annotations": {
                   "devshare.io/allocation": "{broken",
                   "scheduling.koordinator.sh/device-allocated": json.dumps(
                       {"gpu": [{"minor": 1, "id": "GPU-n1-1", "resources": {
                           "koordinator.sh/gpu-core": "40", "koordinator.sh/gpu-memory-ratio": "40"}}]})}},
               "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}}
        mb.apply(pod)
        await eventually(lambda: sync.cluster.malformed == 1)
        assert used(sync.state, "n1")[1][1] == 40.0


async def test_koordinators_device_kind_is_optional(tmp_path: Path) -> None:
    server = await FakeApiServer().start()
    backend = KubeClient.connect(server.write_kubeconfig(tmp_path / "kc"), watch_timeout=30)
    try:
        server.put(node("n1"))
        server.put(device("n1"))
        async with following(backend) as sync:  # the fake API server serves no such kind: synced all the same
            assert "koorddevices" in sync.informer.absent_kinds and "n1" in sync.state.devices
    finally:
        await backend.close()
        await server.stop()


def _nvidia_plugin_pod(uid: str) -> dict[str, Any]:
    """A pod kube-scheduler placed and NVIDIA's device plugin served: nothing on it names its card."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "legacy", "namespace": "default", "uid": uid},
            "spec": {"nodeName": "n1", "containers": [{"name": "cuda",
                                                       "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
            "status": {"phase": "Running"}}


def _device_with_checkpoint(entries: list[dict[str, Any]]) -> dict[str, Any]:
    d = device("n1", gpus=2)
    d["metadata"]["annotations"] = {"node.koordinator.sh/devices-checkpoints": json.dumps(entries)}
    return d


async def test_migration_order_the_nvidia_plugins_cards_are_never_handed_out_again() -> None:
    """Issue 36, item 7 (docs/migrate.md, "Plain NVIDIA"): NVIDIA's device plugin's pods carry no record
    of their cards. While the node agent reports them from kubelet's checkpoint (it does not serve
    nvidia.com/gpu yet), exactly those cards are held; once it serves nvidia.com/gpu itself (NVIDIA's
    plugin taken away) and reports them no more, every GPU of the node counts as held until the pod
    ends. Never a card kubelet gave that pod is placed again."""
    from devshare.engine.scheduler import Scheduler
    from devshare.model.pod import parse_pod

    entry = {"podUID": "uid-legacy", "containerName": "cuda", "resourceName": "nvidia.com/gpu",
             "deviceIDs": ["GPU-n1-1"]}
    mb = MemoryBackend.from_objects([node("n1"), _device_with_checkpoint([entry]), _nvidia_plugin_pod("uid-legacy")])
    whole = parse_pod({"metadata": {"name": "new", "namespace": "default"},
                       "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    async with following(mb) as sync:
        # step 1: the agent reports the card NVIDIA's plugin handed out: that card, and only it, is held
        assert sync.state.pods["default/legacy"].problems == ()
        placed = Scheduler(sync.state).place(whole)
        assert placed is not None and [g.minor for _, g in placed.allocation.grants()] == [0]
        n = next(n for n in sync.state.inspect()["nodes"] if n["name"] == "n1")
        assert [d["heldOutside"] for d in n["devices"]] == [False, True]
        # step 2: NVIDIA's plugin gone, devshare's agent serves nvidia.com/gpu and reports the card no more
        mb.apply(_device_with_checkpoint([]))
        await eventually(lambda: bool(sync.state.pods["default/legacy"].problems))
        assert Scheduler(sync.state).place(whole) is None
        assert "every GPU of the node counts as held" in sync.state.pods["default/legacy"].problems[0]
        # the pod ends: its node is free again
        done = _nvidia_plugin_pod("uid-legacy")
        done["status"] = {"phase": "Succeeded"}
        mb.apply(done)
        await eventually(lambda: Scheduler(sync.state).place(whole) is not None)


async def test_an_unreadable_koordinator_device_is_listed_until_it_is_read() -> None:
    """Issue 36: a peer's inventory that could not be read was only logged. /inspect lists it (with
    why) while it stays unreadable, and drops it once it reads or goes."""
    objs = docs("koordinator")
    mb = MemoryBackend.from_objects(objs)
    good = copy.deepcopy(next(d for d in objs if d["kind"] == "Device" and d["metadata"]["name"] == "koord-2"))
    async with following(mb) as sync:
        assert "unreadableInventories" not in sync.state.inspect()
        bad = copy.deepcopy(good)
        bad["spec"]["devices"][0]["minor"] = "zero"
        mb.apply(bad)
        await eventually(lambda: "unreadableInventories" in sync.state.inspect())
        [unread] = sync.state.inspect()["unreadableInventories"]
        assert unread["node"] == "koord-2" and unread["source"] == "koordinator" and unread["problem"]
        assert "koord-2" in sync.state.devices  # what it said before is kept
        mb.apply(good)
        await eventually(lambda: "unreadableInventories" not in sync.state.inspect())
        mb.apply(bad)
        await eventually(lambda: "unreadableInventories" in sync.state.inspect())
        mb.delete("koorddevices", "koord-2")
        await eventually(lambda: "unreadableInventories" not in sync.state.inspect())
