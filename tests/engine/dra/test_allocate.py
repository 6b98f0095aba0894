"""The DRA allocator over the engine: claims become engine requests, placed by the same scheduler as
extended-resource pods, counted in the same state."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devshare.engine.dra.allocate import PodAsk, Refusal, allocate, record_request, recorded
from devshare.engine.dra.inventory import Inventory
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.records import Conflict
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model import dra, draslices
from devshare.model.dra import parse_claim
from devshare.model.draslices import DeviceExtras, parse_device_class, parse_slice, slice_object
from support.cluster import GiB, add_node, bound, gpu, occupy, pod

_ids = itertools.count()


def share_id() -> str:
    return f"00000000-0000-0000-0000-{next(_ids):012d}"


def cluster(nodes: int = 2, gpus: int = 4, *, numa: bool = False,
            model: str = "A100") -> tuple[ClusterState, Inventory]:
    state = ClusterState()
    inv = Inventory()
    for n in range(nodes):
        add_node(state, f"n{n}", gpus, memory=16 * GiB, model=model, rdma=1)
        extras = {("gpu", i): DeviceExtras(numa_node=i * 2 // gpus if numa else 0, driver_version="535.104.05")
                  for i in range(gpus)}
        obj = slice_object(state.devices[f"n{n}"], extras=extras)
        inv.set_slice(obj["metadata"]["name"], parse_slice(obj))
    for name, (dtype, whole) in dra.shipped_classes().items():
        inv.set_class(parse_device_class(draslices.device_class_object(name, dtype, whole=whole)))
    return state, inv


def claim(name: str, *requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None,
          ns: str = "default") -> Any:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return parse_claim({"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": "1"},
                        "spec": {"devices": devices}})


def request(name: str = "gpu", *, cls: str = dra.CLASS_GPU, count: int | None = None, mode: str | None = None,
            compute: str | None = None, memory: str | None = None, cel: str | None = None) -> dict[str, Any]:
    ex: dict[str, Any] = {"deviceClassName": cls}
    if count is not None:
        ex["count"] = count
    if mode:
        ex["allocationMode"] = mode
    caps = {k: v for k, v in (("compute", compute), ("memory", memory)) if v is not None}
    if caps:
        ex["capacity"] = {"requests": caps}
    if cel:
        ex["selectors"] = [{"cel": {"expression": cel}}]
    return {"name": name, "exactly": ex}


def ask(*claims: Any, node: str = "") -> PodAsk:
    return PodAsk(namespace="default", name="p", uid="pod-uid", claims=tuple(claims), node=node)


def commit(state: ClusterState, decision: Any) -> None:
    life = Lifecycle(Scheduler(state))
    for c in decision.claims:
        life.assume(c.record, c.allocation, now=0.0)
        life.confirm(c.record, c.allocation)


def test_share_of_a_gpu_becomes_compute_and_memory_on_one_card() -> None:
    state, inv = cluster()
    d = allocate(Scheduler(state), inv, ask(claim("c1", request(compute="30", memory="6Gi"))), share_id=share_id)
    (c,) = d.claims
    (res,) = c.results
    assert res.driver == dra.DRIVER and res.pool == d.node and res.device.startswith("gpu-")
    assert res.consumed == {"compute": 30, "memory": 6 * GiB}
    assert res.share_id
    (g,) = c.allocation.grants()[0][1:]
    assert (g.core_milli, g.memory) == (300, 6 * GiB)
    assert c.record.key == dra.claim_record_key("default", "c1")


def test_claims_and_extended_resource_pods_share_one_accounting() -> None:
    state, inv = cluster(nodes=1, gpus=1)
    bound(state, "ext", "n0", 0, core=800, memory=2 * GiB)  # an extended-resource pod holds 80%
    with pytest.raises(Refusal):
        allocate(Scheduler(state), inv, ask(claim("c1", request(compute="30"))), share_id=share_id)
    d = allocate(Scheduler(state), inv, ask(claim("c2", request(compute="20"))), share_id=share_id)
    commit(state, d)
    # now the card is full: an extended-resource pod asking 10% does not fit either
    assert Scheduler(state).place(pod("ext2", gpu(10))) is None


def test_a_claim_without_capacity_takes_a_whole_gpu_and_whole_class_too() -> None:
    state, inv = cluster(nodes=1, gpus=2)
    d1 = allocate(Scheduler(state), inv, ask(claim("a", request())), share_id=share_id)
    commit(state, d1)
    d2 = allocate(Scheduler(state), inv, ask(claim("b", request(cls=dra.CLASS_WHOLE_GPU))), share_id=share_id)
    commit(state, d2)
    assert {d1.claims[0].results[0].device, d2.claims[0].results[0].device} == {"gpu-0", "gpu-1"}
    assert d2.claims[0].results[0].consumed["compute"] == 100
    with pytest.raises(Refusal):
        allocate(Scheduler(state), inv, ask(claim("c", request(compute="1"))), share_id=share_id)


def test_cel_selector_restricts_devices() -> None:
    state, inv = cluster(nodes=2, gpus=2)
    expr = 'device.attributes["gpu.devshare.io"].uuid == "GPU-n1-1"'
    d = allocate(Scheduler(state), inv, ask(claim("c", request(compute="10", cel=expr))), share_id=share_id)
    assert (d.node, d.claims[0].results[0].device) == ("n1", "gpu-1")


def test_cel_quantity_and_semver_selectors() -> None:
    state, inv = cluster(nodes=1, gpus=1)
    ok = ('device.capacity["gpu.devshare.io"].memory.compareTo(quantity("16Gi")) >= 0 && '
          'device.attributes["gpu.devshare.io"].driverVersion.isGreaterThan(semver("530.0.0"))')
    allocate(Scheduler(state), inv, ask(claim("c", request(compute="10", cel=ok))), share_id=share_id)
    too_big = 'device.capacity["gpu.devshare.io"].memory.compareTo(quantity("32Gi")) >= 0'
    with pytest.raises(Refusal, match="matches the selectors"):
        allocate(Scheduler(state), inv, ask(claim("d", request(compute="10", cel=too_big))), share_id=share_id)


def test_unsupported_kubernetes_cel_function_is_a_permanent_refusal() -> None:
    state, inv = cluster(nodes=1)
    with pytest.raises(Refusal) as e:
        allocate(Scheduler(state), inv, ask(claim("c", request(cel='isIP("10.0.0.1")'))), share_id=share_id)
    assert e.value.permanent and "IP CEL library" in e.value.message


def test_count_and_topology_multi_gpu_claim() -> None:
    state, inv = cluster(nodes=1, gpus=4)
    d = allocate(Scheduler(state), inv, ask(claim("c", request(count=2, cls=dra.CLASS_WHOLE_GPU))), share_id=share_id)
    assert len(d.claims[0].results) == 2
    assert len({r.device for r in d.claims[0].results}) == 2


def test_allocation_mode_all_takes_every_matching_device() -> None:
    state, inv = cluster(nodes=2, gpus=3)
    bound(state, "busy", "n0", 1, core=100)
    d = allocate(Scheduler(state), inv, ask(claim("c", request(mode="All", cls=dra.CLASS_WHOLE_GPU))),
                 share_id=share_id)
    assert d.node == "n1" and sorted(r.device for r in d.claims[0].results) == ["gpu-0", "gpu-1", "gpu-2"]


def test_match_attribute_keeps_devices_on_one_numa_node() -> None:
    state, inv = cluster(nodes=1, gpus=4, numa=True)
    bound(state, "busy", "n0", 0, core=1000)  # numa 0 keeps one free GPU, numa 1 two
    c = claim("c", request("a", cls=dra.CLASS_WHOLE_GPU), request("b", cls=dra.CLASS_WHOLE_GPU),
              constraints=[{"matchAttribute": "gpu.devshare.io/numaNode"}])
    d = allocate(Scheduler(state), inv, ask(c), share_id=share_id)
    assert sorted(r.device for r in d.claims[0].results) == ["gpu-2", "gpu-3"]


def test_first_available_takes_the_first_alternative_that_fits() -> None:
    state, inv = cluster(nodes=1, gpus=1)
    c = parse_claim({"metadata": {"name": "c", "namespace": "default"}, "spec": {"devices": {"requests": [
        {"name": "r", "firstAvailable": [
            {"name": "big", "deviceClassName": dra.CLASS_GPU, "count": 2},
            {"name": "small", "deviceClassName": dra.CLASS_GPU, "capacity": {"requests": {"compute": "50"}}}]}]}}})
    d = allocate(Scheduler(state), inv, ask(c), share_id=share_id)
    assert d.claims[0].results[0].request == "r/small"


def test_several_claims_of_one_pod_land_on_one_node() -> None:
    state, inv = cluster(nodes=2, gpus=1)
    d = allocate(Scheduler(state), inv, ask(claim("a", request(compute="40")), claim("b", request(compute="40"))),
                 share_id=share_id)
    assert {c.allocation.node for c in d.claims} == {d.node}
    assert d.claims[0].results[0].device == d.claims[1].results[0].device == "gpu-0"


def test_a_node_fixed_by_another_claim_is_kept() -> None:
    state, inv = cluster(nodes=3, gpus=1)
    d = allocate(Scheduler(state), inv, ask(claim("a", request(compute="10")), node="n2"), share_id=share_id)
    assert d.node == "n2"


def test_unknown_capacity_and_foreign_class_are_refused() -> None:
    state, inv = cluster(nodes=1)
    with pytest.raises(Refusal, match="is not offered"):
        allocate(Scheduler(state), inv, ask(claim("c", request(memory="1Gi") | {})) if False else
                 ask(parse_claim({"metadata": {"name": "c"}, "spec": {"devices": {"requests": [
                     {"name": "r", "exactly": {"deviceClassName": dra.CLASS_GPU,
                                               "capacity": {"requests": {"bandwidth": "1"}}}}]}}})),
                 share_id=share_id)
    with pytest.raises(Refusal, match="does not exist"):
        allocate(Scheduler(state), inv, ask(claim("d", request(cls="nvidia.com"))), share_id=share_id)


def test_recorded_reads_an_allocation_back() -> None:
    state, inv = cluster(nodes=1, gpus=2)
    d = allocate(Scheduler(state), inv, ask(claim("c", request(compute="30", memory="6Gi"))), share_id=share_id)
    obj = {"metadata": {"name": "c", "namespace": "default", "uid": "uid-c"},
           "spec": {"devices": {"requests": [request(compute="30", memory="6Gi")]}},
           "status": {"allocation": dra.allocation_status(list(d.claims[0].results), d.node)}}
    assert recorded(state, inv, parse_claim(obj)) == d.claims[0].allocation


def test_kube_scheduler_allocation_without_consumed_capacity_counts_whole() -> None:
    state, inv = cluster(nodes=1, gpus=1)
    obj = {"metadata": {"name": "k", "namespace": "default"}, "spec": {"devices": {"requests": []}},
           "status": {"allocation": {"devices": {"results": [
               {"request": "r", "driver": dra.DRIVER, "pool": "n0", "device": "gpu-0"}]},
               "nodeSelector": dra.node_selector("n0")}}}
    c = parse_claim(obj)
    alloc = recorded(state, inv, c)
    assert alloc is not None and alloc.grants()[0][1].core_milli == 1000
    occupy(state, record_request(c), alloc)
    assert Scheduler(state).place(pod("x", gpu(10))) is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 10), st.integers(0, 8)), min_size=1, max_size=30))
def test_no_card_is_ever_overbooked_by_claims_and_pods_together(asks: list[tuple[bool, int, int]]) -> None:
    """Property: claims and extended-resource pods arriving in any order never book a card beyond its
    compute or memory."""
    state, inv = cluster(nodes=2, gpus=2)
    life = Lifecycle(Scheduler(state))
    for k, (is_claim, tenth, gib) in enumerate(asks):
        if is_claim:
            try:
                d = allocate(life.scheduler, inv, ask(claim(f"c{k}", request(compute=str(tenth * 10),
                                                                              memory=f"{gib}Gi"))), share_id=share_id)
            except Refusal:
                continue
            for c in d.claims:
                life.assume(c.record, c.allocation, now=0.0)
        else:
            placed = life.schedule(pod(f"p{k}", gpu(tenth * 10, gib * GiB)), now=0.0)
            if placed is None:
                continue
    t = state.tables["gpu"]
    for node, row in state.row_of.items():
        n = t.count(row)
        assert (t.used_core[row, :n] <= t.total_core[row, :n]).all(), node
        assert (t.used_mem[row, :n] <= t.total_mem[row, :n]).all(), node


def test_assume_refuses_a_stale_decision() -> None:
    state, inv = cluster(nodes=1, gpus=1)
    d1 = allocate(Scheduler(state), inv, ask(claim("a", request(compute="70"))), share_id=share_id)
    d2 = allocate(Scheduler(state), inv, ask(claim("b", request(compute="70"))), share_id=share_id)
    commit(state, d1)
    with pytest.raises(Conflict):
        commit(state, d2)
