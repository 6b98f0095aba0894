"""An allocation written on a pod that would over-book a card (issue 12: a pod created with
``spec.nodeName`` and its own ``devshare.io/allocation`` took GPU 0 to 165% and 91 GiB of 80) is
refused and reported, never counted: a ``DeviceOverbooked`` Event on the pod and the metric
``devshare_extender_overbooked_allocations_total``. On a restart the earlier allocation keeps the card."""

from __future__ import annotations

from typing import Any

from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.codecs import encode_canonical
from devshare.server.extender.serve import ExtenderOptions
from support.extender import GiB, cluster, pod, running, settle


def with_allocation(name: str, core: int, mem_gib: int, *, scheduled: str, minor: int = 0) -> dict[str, Any]:
    alloc = PodAllocation(node="node-0", containers=(ContainerAllocation(name="main", devices=(
        DeviceGrant(type="gpu", minor=minor, id=f"GPU-node-0-{minor}", core_milli=core * 10,
                    memory=mem_gib * GiB),)),))
    obj = pod(name, core=core, mem=f"{mem_gib}Gi", node_name="node-0", annotations=encode_canonical(alloc))
    obj["metadata"]["creationTimestamp"] = scheduled
    obj["status"] = {"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}]}
    return obj


def gpu0(inspect: dict[str, Any]) -> dict[str, Any]:
    node = next(n for n in inspect["nodes"] if n["name"] == "node-0")
    return next(d for d in node["devices"] if d["minor"] == 0)  # type: ignore[no-any-return]


async def test_a_hand_written_allocation_that_would_over_book_a_card_is_refused_and_reported() -> None:
    backend = cluster(nodes=1, gpus=2, memory=16 * GiB,
                      pods=[with_allocation("real", 60, 10, scheduled="2026-01-01T00:00:00Z")])
    async with running(backend, ExtenderOptions()) as (client, runtime):
        # a user creates a pod on the node with an allocation of their own: GPU 0 would hold 120%
        backend.store.put("pods", "default/forged",
                          with_allocation("forged", 60, 10, scheduled="2026-01-01T00:01:00Z"))
        # and one that fits (GPU 1 is free): an allocation is refused only when it over-books
        backend.store.put("pods", "default/fits",
                          with_allocation("fits", 30, 4, scheduled="2026-01-01T00:02:00Z", minor=1))
        await settle(runtime, backend)
        assert "default/forged" not in runtime.state.pods and "default/fits" in runtime.state.pods
        card = gpu0(await (await client.get("/inspect")).json())
        assert card["pods"] == ["default/real/main"] and card["used"]["core"] == 60, card
        metrics = await (await client.get("/metrics")).text()
        assert "devshare_extender_overbooked_allocations_total 1.0" in metrics
        for _ in range(200):
            events = [e for e in backend.store.objects.get("events", {}).values()
                      if e["involvedObject"]["name"] == "forged"]
            if events:
                break
            await settle(runtime, backend)
        assert len(events) == 1 and events[0]["reason"] == "DeviceOverbooked" and events[0]["type"] == "Warning"
        assert "gpu 0 of node node-0 would hold 120% compute" in events[0]["message"]
        # the same pod changing again is judged again, but reported once
        obj = dict(backend.store.objects["pods"]["default/forged"])
        obj["metadata"] = {**obj["metadata"], "labels": {"touched": "yes"}}
        backend.store.put("pods", "default/forged", obj)
        await settle(runtime, backend)
        assert "default/forged" not in runtime.state.pods
        assert len([e for e in backend.store.objects.get("events", {}).values()
                    if e["involvedObject"]["name"] == "forged"]) == 1
        # once the real pod is gone, the allocation fits and is counted at its next change
        backend.store.delete("pods", "default/real")
        obj["metadata"] = {**obj["metadata"], "labels": {"touched": "again"}}
        backend.store.put("pods", "default/forged", obj)
        await settle(runtime, backend)
        assert "default/forged" in runtime.state.pods


async def test_a_restart_keeps_the_card_for_the_allocation_made_first() -> None:
    # "a-forged" sorts first by name, but "z-real" got its node first: z-real keeps the card
    backend = cluster(nodes=1, gpus=1, memory=16 * GiB, pods=[
        with_allocation("z-real", 60, 10, scheduled="2026-01-01T00:00:00Z"),
        with_allocation("a-forged", 60, 10, scheduled="2026-01-01T00:05:00Z"),
    ])
    async with running(backend, ExtenderOptions()) as (_client, runtime):
        assert set(runtime.state.pods) == {"default/z-real"}
        assert runtime.cluster.overbooked == 1
