"""The DRA allocation controller against the fake API server (real REST and watch, resourceVersion
preconditions): gated pods get their claims allocated and their gate lifted; a restart rebuilds the
same accounting from claims and slices; a pod deleted before its gate is lifted gets its claims
released; a stale decision never writes (409)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.kube.dra import LiveDraApi
from devshare.kube.errors import BackendError, NotFound
from devshare.kube.rest import KubeClient
from devshare.model import dra, draslices
from devshare.model.dra import parse_claim
from devshare.model.draslices import slice_object
from devshare.server.dra.controller import DraController
from fakeapi.server import FakeApiServer
from support.cluster import GiB, add_node, bound, usage_key
from support.waiting import eventually, settled


@pytest.fixture
async def dra_api(fake_api: FakeApiServer, fake_kubeconfig: Path) -> AsyncIterator[LiveDraApi]:
    client = KubeClient.connect(fake_kubeconfig, watch_timeout=30)
    try:
        yield LiveDraApi(client)
    finally:
        await client.close()


def engine(nodes: int = 2, gpus: int = 2) -> Lifecycle:
    state = ClusterState()
    for n in range(nodes):
        add_node(state, f"n{n}", gpus, memory=16 * GiB)
    return Lifecycle(Scheduler(state))


def publish(fake: FakeApiServer, life: Lifecycle) -> None:
    for name, (dtype, whole) in dra.shipped_classes().items():
        fake.put(draslices.device_class_object(name, dtype, whole=whole))
    for nd in life.state.devices.values():
        fake.put(slice_object(nd))


def claim(name: str, *, compute: str | None = "30", memory: str | None = "6Gi", cls: str = dra.CLASS_GPU,
          ns: str = "default") -> dict[str, Any]:
    caps = {k: v for k, v in (("compute", compute), ("memory", memory)) if v is not None}
    ex: dict[str, Any] = {"deviceClassName": cls}
    if caps:
        ex["capacity"] = {"requests": caps}
    return {"apiVersion": dra.API_VERSION, "kind": "ResourceClaim", "metadata": {"name": name, "namespace": ns},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": ex}]}}}


def gated_pod(name: str, *claims: str, ns: str = "default") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulingGates": [{"name": dra.GATE}],
                     "resourceClaims": [{"name": f"r{i}", "resourceClaimName": c} for i, c in enumerate(claims)],
                     "containers": [{"name": "main", "image": "x"}]}}


async def until(cond: Callable[[], bool], what: str) -> None:
    await eventually(cond, what=what)  # no deadline a loaded machine could miss (support.waiting)


def allocation(fake: FakeApiServer, key: str) -> dict[str, Any] | None:
    obj = fake.get("resourceclaims", key)
    return (obj or {}).get("status", {}).get("allocation")


def gates(fake: FakeApiServer, key: str) -> list[Any]:
    return list(((fake.get("pods", key) or {}).get("spec") or {}).get("schedulingGates") or [])


async def test_gated_pod_gets_its_claim_allocated_and_its_gate_lifted(fake_api: FakeApiServer,
                                                                      dra_api: LiveDraApi) -> None:
    life = engine()
    publish(fake_api, life)
    fake_api.put(claim("c1"))
    fake_api.put(gated_pod("p1", "c1"))
    ctl = DraController(dra_api, life, retry=0.05)
    ctl.start()
    try:
        await until(lambda: not gates(fake_api, "default/p1"), "gate lifted")
        a = allocation(fake_api, "default/c1")
        assert a is not None
        (res,) = a["devices"]["results"]
        assert res["driver"] == dra.DRIVER and res["consumedCapacity"] == {"compute": "30", "memory": "6Gi"}
        assert res["shareID"]
        assert a["nodeSelector"] == dra.node_selector(res["pool"])
        rec = life.state.pods[dra.claim_record_key("default", "c1")]
        assert rec.phase == "bound"
    finally:
        await ctl.stop()


async def test_restart_rebuilds_the_same_accounting(fake_api: FakeApiServer, dra_api: LiveDraApi) -> None:
    life = engine()
    publish(fake_api, life)
    for i in range(3):
        fake_api.put(claim(f"c{i}", compute="40", memory="2Gi"))
        fake_api.put(gated_pod(f"p{i}", f"c{i}"))
    ctl = DraController(dra_api, life, retry=0.05)
    ctl.start()
    try:
        await until(lambda: all(not gates(fake_api, f"default/p{i}") for i in range(3)), "all gates lifted")
    finally:
        await ctl.stop()
    again = engine()
    ctl2 = DraController(dra_api, again, retry=0.05)
    ctl2.start()
    try:
        await until(lambda: ctl2.synced.is_set(), "synced")
        assert usage_key(again.state) == usage_key(life.state)
    finally:
        await ctl2.stop()


async def test_claims_and_bound_pods_never_overbook(fake_api: FakeApiServer, dra_api: LiveDraApi) -> None:
    life = engine(nodes=1, gpus=1)
    bound(life.state, "ext", "n0", 0, core=800)  # an extended-resource pod holds 80% of the only GPU
    publish(fake_api, life)
    fake_api.put(claim("big", compute="30", memory=None))
    fake_api.put(gated_pod("p-big", "big"))
    fake_api.put(claim("small", compute="20", memory=None))
    fake_api.put(gated_pod("p-small", "small"))
    ctl = DraController(dra_api, life, retry=0.05)
    ctl.start()
    try:
        await until(lambda: not gates(fake_api, "default/p-small"), "small allocated")
        await until(lambda: any(e["reason"] == "FailedDRAAllocation" and e["involvedObject"]["name"] == "p-big"
                                for e in fake_api.store.list("events")[0]), "p-big refused")
        assert allocation(fake_api, "default/big") is None
        assert gates(fake_api, "default/p-big")
    finally:
        await ctl.stop()


@pytest.mark.parametrize(("spec", "field"), [("q", "spec"), ({"devices": []}, "spec.devices")])
async def test_a_malformed_claim_is_refused_with_an_event_and_the_rest_still_allocated(
        fake_api: FakeApiServer, dra_api: LiveDraApi, caplog: pytest.LogCaptureFixture, spec: Any, field: str) -> None:
    """A claim whose spec is not a mapping (parse_claim raised AttributeError: the first list crashed
    the controller's task) or whose spec.devices is an empty list (read as no requests: the pod's
    gate was lifted as if its claim were not devshare's) is logged and left unallocated, its pod gets
    a Warning Event naming the field and keeps its gate, and every other pod is allocated as ever."""
    life = engine()
    publish(fake_api, life)
    fake_api.put({**claim("bad"), "spec": spec})
    fake_api.put(gated_pod("p-bad", "bad"))
    fake_api.put(claim("good"))
    fake_api.put(gated_pod("p-good", "good"))
    ctl = DraController(dra_api, life, retry=0.05)
    task = ctl.start()
    try:
        await until(lambda: not gates(fake_api, "default/p-good"), "good allocated")
        await until(lambda: any(e["reason"] == "FailedDRAAllocation" and e["involvedObject"]["name"] == "p-bad"
                                for e in fake_api.store.list("events")[0]), "p-bad refused")
        (event,) = [e for e in fake_api.store.list("events")[0] if e["involvedObject"]["name"] == "p-bad"]
        assert f"ResourceClaim default/bad: {field}: must be a mapping" in event["message"]
        assert allocation(fake_api, "default/bad") is None and gates(fake_api, "default/p-bad")
        assert not task.done() and ctl.invalid >= 1
        assert "ignoring resourceclaims default/bad" in caplog.text
    finally:
        await ctl.stop()


async def test_pod_deleted_before_its_gate_is_lifted_releases_its_claim(fake_api: FakeApiServer,
                                                                        dra_api: LiveDraApi) -> None:
    life = engine(nodes=1, gpus=1)
    publish(fake_api, life)
    c = claim("c1", compute="50", memory=None)
    fake_api.put(c)
    stored = fake_api.get("resourceclaims", "default/c1")
    assert stored is not None
    stored = copy.deepcopy(stored)
    stored["status"] = {"allocation": dra.allocation_status(
        list(parse_claim({**stored, "status": {"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": dra.DRIVER, "pool": "n0", "device": "gpu-0",
                                     "consumedCapacity": {"compute": "50"}}]},
            "nodeSelector": dra.node_selector("n0")}}}).allocation.results), "n0")}  # type: ignore[union-attr]
    fake_api.put(stored)
    fake_api.put(gated_pod("p1", "c1"))
    ctl = DraController(dra_api, life, is_leader=lambda: False, retry=0.05)
    ctl.start()
    try:
        await until(lambda: ctl.synced.is_set(), "synced")
        key = dra.claim_record_key("default", "c1")
        assert key in life.state.pods
        ctl.is_leader = lambda: True
        fake_api.delete("pods", "default/p1")
        await until(lambda: allocation(fake_api, "default/c1") is None, "claim released")
        await until(lambda: key not in life.state.pods, "record released")
        assert ctl.released == 1
    finally:
        await ctl.stop()


async def test_a_pod_without_claims_leaving_the_pending_pods_costs_no_read(fake_api: FakeApiServer,
                                                                         dra_api: LiveDraApi) -> None:
    """The pending pods are watched with ``spec.nodeName=``: every pod bound leaves that watch (DELETED).
    Only a pod with claims may have some to release; the others are not read again (at 5,000 nodes,
    bench_e2e counted one GET per pod scheduled before this: 3,000 requests for 3,000 pods)."""
    life = engine()
    publish(fake_api, life)
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": "default"},
             "spec": {"containers": [{"name": "main", "image": "x"}]}}
    fake_api.put(plain)
    ctl = DraController(dra_api, life, retry=0.05)
    ctl.start()
    try:
        await until(lambda: "default/plain" in ctl.pods, "pending pod seen")
        reads = fake_api.count("get", "pods")
        fake_api.store.patch("pods", "default/plain", {"spec": {"nodeName": "n0"}})  # bound
        await until(lambda: "default/plain" not in ctl.pods, "left the pending pods")
        assert fake_api.count("get", "pods") == reads and not ctl._side
    finally:
        await ctl.stop()


async def test_a_stale_decision_never_writes(fake_api: FakeApiServer, dra_api: LiveDraApi) -> None:
    life = engine(nodes=1, gpus=1)
    publish(fake_api, life)
    fake_api.put(claim("c1"))
    ctl = DraController(dra_api, life, is_leader=lambda: False, retry=0.05)
    ctl.start()
    try:
        await until(lambda: ctl.synced.is_set(), "synced")
        seen = copy.deepcopy(ctl.claims["default/c1"])  # what this replica decided from
        decided = parse_claim(seen)
        other = copy.deepcopy(fake_api.get("resourceclaims", "default/c1"))
        other["status"] = {"allocation": dra.allocation_status([], "n0")}  # another writer wins the race
        fake_api.put(other)
        ctl.claims["default/c1"] = seen  # its watch has not shown the other write yet
        assert await ctl._write_claim(decided, dra.allocation_status([], "n0")) is None
        assert ctl.conflicts == 1
    finally:
        await ctl.stop()


async def test_pods_without_devshare_claims_are_released_at_once(fake_api: FakeApiServer,
                                                                 dra_api: LiveDraApi) -> None:
    life = engine()
    publish(fake_api, life)
    fake_api.put(claim("other", cls="gpu.example.com", compute=None, memory=None))
    fake_api.put(gated_pod("p", "other"))
    ctl = DraController(dra_api, life, retry=0.05)
    ctl.start()
    try:
        await until(lambda: not gates(fake_api, "default/p"), "gate lifted")
        assert allocation(fake_api, "default/other") is None  # kube-scheduler's to allocate
    finally:
        await ctl.stop()


async def test_a_replica_that_does_not_lead_never_allocates(fake_api: FakeApiServer, dra_api: LiveDraApi) -> None:
    life = engine()
    publish(fake_api, life)
    fake_api.put(claim("c1"))
    fake_api.put(gated_pod("p1", "c1"))
    leading = [False]
    ctl = DraController(dra_api, life, is_leader=lambda: leading[0], retry=0.05)
    ctl.start()
    try:
        await until(lambda: ctl.synced.is_set() and "default/p1" in ctl._waiting, "tried once")
        for _ in range(5):  # several retry rounds
            await asyncio.sleep(0.06)
        assert allocation(fake_api, "default/c1") is None and gates(fake_api, "default/p1")
        assert not any(k.endswith("resourceclaim:c1") for k in life.state.pods)
        leading[0] = True  # it takes over: the waiting pod is allocated at the next round
        await until(lambda: not gates(fake_api, "default/p1"), "allocated once leading")
    finally:
        await ctl.stop()


async def test_a_fence_that_fails_writes_nothing_and_holds_nothing(fake_api: FakeApiServer,
                                                                   dra_api: LiveDraApi) -> None:
    life = engine()
    publish(fake_api, life)
    fake_api.put(claim("c1"))
    fake_api.put(gated_pod("p1", "c1"))

    async def deposed() -> str | None:
        return "another replica holds the Lease"

    ctl = DraController(dra_api, life, fence=deposed, retry=0.05)
    ctl.start()
    try:
        await until(lambda: ctl.synced.is_set() and "default/p1" in ctl._waiting, "tried")
        await asyncio.sleep(0.2)
        assert allocation(fake_api, "default/c1") is None
        assert not any(k.endswith("resourceclaim:c1") for k in life.state.pods)  # the assumption was dropped
    finally:
        await ctl.stop()


async def test_a_cluster_without_resource_k8s_io_turns_dra_off_at_once() -> None:
    """Before Kubernetes 1.34 the API server serves no resource.k8s.io/v1: the allocator says so once
    and stops, instead of retrying a list that cannot work (the extender schedules the rest as ever)."""

    class Unserved:
        lists = 0

        async def list(self, kind: str) -> Any:
            self.lists += 1
            raise NotFound(f"{kind}: the API server does not serve it")

    api = Unserved()
    controller = DraController(api, engine())  # type: ignore[arg-type]
    await settled(controller.run())
    assert controller.off and not controller.synced.is_set() and api.lists == 1


async def test_without_dras_rbac_the_allocator_says_what_to_install_and_stops(caplog: pytest.LogCaptureFixture) -> None:
    class Refused:
        async def list(self, kind: str) -> Any:
            raise BackendError(f"{kind}: forbidden", code=403)

    controller = DraController(Refused(), engine())  # type: ignore[arg-type]
    await settled(controller.run())
    assert controller.off and "kubectl apply -k deploy/dra" in caplog.text
