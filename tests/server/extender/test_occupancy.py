"""Occupancy (/ui/occupancy), the stranded-GPU and per-card metrics, and the read-only listener."""

from __future__ import annotations

import json
import socket
from typing import Any

import numpy as np
import pytest

from devshare.engine.stateview import DeviceColumns
from devshare.kube.memory import MemoryBackend
from devshare.server.extender.occupancy import stranded_core
from devshare.server.extender.serve import ExtenderOptions
from support.extender import GiB, bind, cluster, device, names_body, node, pod, post, running
from support.waiting import eventually

MiB = 2**20


def holder(name: str, minor: int, core: int, memory: int, node_name: str = "n0") -> dict[str, Any]:
    alloc = {"node": node_name, "containers": [{"name": "main", "devices": [
        {"type": "gpu", "minor": minor, "id": f"GPU-{node_name}-{minor}", "core": core, "memory": memory,
         "memoryRatio": round(memory / (16 * GiB) * 100, 2)}]}]}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": {"devshare.io/allocation": json.dumps(alloc)}},
            "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "x", "resources": {"limits": {
                "koordinator.sh/gpu-core": str(core), "koordinator.sh/gpu-memory": str(memory)}}}]},
            "status": {"phase": "Running"}}


def backend() -> MemoryBackend:
    return MemoryBackend.from_objects([
        node("n0"), device("n0", gpus=4, memory=16 * GiB, unhealthy=(3,)),
        holder("hog", 0, 20, 16 * GiB - 128 * MiB),      # 80% of card 0 can never be used: stranded
        holder("half", 1, 50, 8 * GiB),                  # card 1: half used, the rest usable
        holder("tight", 2, 60, 16 * GiB - 256 * MiB),    # card 2: exactly 256 MiB left: still usable
    ])


def dev(core_used: float, mem_used: int, containers: int, *, health: bool = True,
        memory: bool = True) -> DeviceColumns:
    """One device (a card of 16 GiB, or an RDMA device without memory) in columns."""
    return DeviceColumns(
        type="gpu" if memory else "rdma", node=["n0"], id=["d0"], minor=np.array([0]), total_core=np.array([1000]),
        used_core=np.array([round(core_used * 10)]), total_mem=np.array([16 * GiB if memory else 0]),
        used_mem=np.array([mem_used]), containers=np.array([containers]), healthy=np.array([health]),
        held_outside=np.array([False]), memory=memory)


@pytest.mark.parametrize(("d", "stranded"), [
    (dev(20, 16 * GiB - 128 * MiB, 1), 80.0),       # memory gone
    (dev(20, 16 * GiB - 256 * MiB, 1), 0.0),        # 256 MiB: a share still fits
    (dev(50, 1 * GiB, 16), 50.0),                   # at the container limit
    (dev(0, 0, 0), 0.0),                            # idle: a whole card for whoever asks
    (dev(100, 16 * GiB, 1), 0.0),                   # full: nothing free
    (dev(20, 16 * GiB, 1, health=False), 0.0),      # unhealthy: unavailable, not stranded
    (dev(30, 0, 16, memory=False), 70.0),           # RDMA at the limit
    (dev(30, 0, 1, memory=False), 0.0),
])
def test_stranded_core(d: DeviceColumns, stranded: float) -> None:
    assert stranded_core(d, 16).tolist() == [stranded]


async def test_occupancy_endpoint_says_who_holds_what() -> None:
    async with running(backend()) as (client, _):
        r = await client.get("/ui/occupancy")
        assert r.status == 200
        data = await r.json()
    (n0,) = data["nodes"]
    cards = {d["minor"]: d for d in n0["devices"]}
    assert cards[0]["stranded"] == {"core": 80.0}
    assert cards[0]["holders"] == [{"pod": "default/hog", "container": "main", "phase": "bound", "core": 20.0,
                                    "memory": 16 * GiB - 128 * MiB}]
    assert cards[1]["free"] == {"core": 50.0, "memory": 8 * GiB}
    assert cards[2]["stranded"] == {"core": 0.0}
    assert cards[3]["available"] is False
    assert n0["strandedGpus"] == pytest.approx(0.8)
    assert data["totals"] == {"nodes": 1, "gpus": 4, "gpusUsed": 1.3, "gpusIdle": 0, "strandedGpus": 0.8,
                              "unavailable": 1}
    assert data["maxContainersPerCard"] == 16


async def test_ui_page_is_served() -> None:
    async with running(backend()) as (client, _):
        r = await client.get("/ui", allow_redirects=False)
        assert r.status == 302 and r.headers["Location"] == "/ui/"
        r = await client.get("/ui/")
        assert r.status == 200 and r.content_type == "text/html"
        page = await r.text()
        assert "<title>devshare occupancy</title>" in page and 'fetch("occupancy"' in page


async def test_metrics_per_card_and_stranded() -> None:
    async with running(backend()) as (client, _):
        text = await (await client.get("/metrics")).text()
    assert 'devshare_device_containers{minor="0",node="n0",type="gpu"} 1.0' in text
    assert 'devshare_device_containers{minor="3",node="n0",type="gpu"} 0.0' in text
    assert 'devshare_node_stranded_gpus{node="n0"} 0.8' in text
    assert "devshare_stranded_gpus 0.8" in text
    assert 'devshare_device_allocated_ratio{minor="1",node="n0",resource="core",type="gpu"} 0.5' in text


async def test_read_only_listener_serves_only_reads() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    from aiohttp.test_utils import TestClient, TestServer

    from devshare.server.extender.serve import RUNTIME, build_app

    app = build_app(backend(), ExtenderOptions(metrics_port=port))
    client: TestClient[Any, Any] = TestClient(TestServer(app, port=port))
    await client.start_server()
    try:
        await eventually(lambda: app[RUNTIME].informer.is_synced, what="the extender synced")  # 503 until then
        for path in ("/metrics", "/healthz", "/", "/ui/", "/ui/occupancy", "/inspect"):
            r = await client.get(path)
            assert r.status == 200, path
        for path in ("/filter", "/bind", "/prioritize", "/preempt"):
            r = await client.post(path, data=b"{}")
            assert r.status == 404, path
            assert "read-only port" in await r.text()
    finally:
        await client.close()


def reported(node_name: str = "n0") -> dict[str, Any]:
    """What n0's agent reports: the hog uses 6 GiB of its share, the half pod nothing yet, and a
    process no container could be found for holds 1 GiB on card 1."""
    return {"at": "2026-11-28T07:40:00Z", "gpus": [
        {"minor": 0, "id": f"GPU-{node_name}-0", "memoryUsed": 6 * GiB, "utilization": 0.9, "containers": [
            {"pod": "default/hog", "container": "main", "memoryUsed": 6 * GiB, "utilization": 0.9}]},
        {"minor": 1, "id": f"GPU-{node_name}-1", "memoryUsed": GiB, "utilization": None, "containers": [
            {"pod": "unknown/unknown", "container": "unknown", "memoryUsed": GiB}]}]}


async def test_occupancy_shows_what_holders_use_beside_what_they_were_given() -> None:
    """Issue 39: the usage the agent writes on the Device, per card and per holder."""
    b = backend()
    b.store.patch("devices", "n0", {"status": {"usage": reported()}})
    async with running(b) as (client, _):
        data = await (await client.get("/ui/occupancy")).json()
    cards = {d["minor"]: d for d in data["nodes"][0]["devices"]}
    assert cards[0]["usage"] == {"at": "2026-11-28T07:40:00Z", "memoryUsed": 6 * GiB, "utilization": 0.9,
                                 "others": []}
    (hog,) = cards[0]["holders"]
    assert (hog["memory"], hog["memoryUsed"], hog["utilization"]) == (16 * GiB - 128 * MiB, 6 * GiB, 0.9)
    (half,) = cards[1]["holders"]
    assert (half["memoryUsed"], half["utilization"]) == (0, None)  # reported nothing: uses nothing
    assert cards[1]["usage"]["others"] == [{"pod": "unknown/unknown", "container": "unknown",
                                            "memoryUsed": GiB, "utilization": None}]
    assert "usage" not in cards[2]  # the node reported nothing of this card
    assert "memoryUsed" not in cards[2]["holders"][0]


async def test_root_leads_to_the_page() -> None:
    async with running(backend()) as (client, _):
        r = await client.get("/", allow_redirects=False)
    assert r.status == 302 and r.headers["Location"] == "/ui/"


async def test_the_queue_says_why_a_pod_was_refused_until_it_is_bound() -> None:
    """Issue 40: the page shows the pods devshare refused, with the reasons its filter and bind gave."""
    waiting = pod("big", core=100, mem="20Gi")
    waiting["spec"]["schedulerName"] = "devshare-scheduler"
    async with running(cluster(2, gpus=2, memory=16 * GiB, pods=[waiting])) as (client, _):
        await post(client, "/filter", names_body(waiting, ["node-0", "node-1"]))
        assert await bind(client, "big", "node-0") != ""
        queue = (await (await client.get("/ui/occupancy")).json())["queue"]
    assert (queue["pending"], queue["refused"], queue["total"]) == (1, 1, 1)
    (big,) = queue["pods"]
    assert big["pod"] == "default/big" and big["pending"]
    assert big["asks"] == {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "20Gi"}
    filtered, bound = big["refusals"]
    assert filtered["verb"] == "filter" and filtered["nodes"] == 2
    assert filtered["reason"].startswith("2 nodes: ") and "20 GiB" in filtered["reason"]
    assert bound["verb"] == "bind" and bound["reason"].startswith("node-0: ")
