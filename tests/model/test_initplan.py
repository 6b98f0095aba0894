"""Init containers with kubelet's semantics (kubernetes/kubernetes pkg/kubelet/cm/devicemanager/manager.go:
Allocate and devicesToReuse hand an init container's devices on; devicesToAllocate takes reusable ones
first): the pod needs max(largest init container, app containers together)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model import initplan
from devshare.model.device import DeviceInfo, NodeDevices
from devshare.model.node import node_info_from_labels
from devshare.model.pod import parse_pod

GiB = 2**30
K = "koordinator.sh/"


def state(gpus: int = 2) -> ClusterState:
    st_ = ClusterState()
    st_.upsert_node(node_info_from_labels("n1"))
    st_.set_devices(NodeDevices(node="n1", devices=tuple(
        DeviceInfo(type="gpu", minor=i, id=f"GPU-{i}", memory=16 * GiB) for i in range(gpus))))
    return st_


def pod(init: list[dict[str, str]], apps: list[dict[str, str]], sidecar: bool = False) -> Any:
    spec = {"initContainers": [{"name": f"i{i}", "resources": {"limits": r},
                                **({"restartPolicy": "Always"} if sidecar else {})} for i, r in enumerate(init)],
            "containers": [{"name": f"a{i}", "resources": {"limits": r}} for i, r in enumerate(apps)]}
    return parse_pod({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec})


def share(p: int) -> dict[str, str]:
    return {K + "gpu-core": str(p), K + "gpu-memory-ratio": str(p)}


def test_an_init_container_inside_an_app_containers_devices_costs_nothing() -> None:
    p = pod([share(20)], [share(50)])
    plan = initplan.plan(p)
    assert [c.name for c in plan.placed] == ["a0"] and plan.hosted == (("i0", "a0"),)
    a = Scheduler(state(1)).place(p)
    assert a is not None
    init = next(c for c in a.allocation.containers if c.init)
    assert [(g.minor, g.core_milli) for g in init.devices] == [(0, 200)]
    assert [(u.core_milli, u.memory) for u in a.allocation.usage()] == [(500, 8 * GiB)]


def test_an_init_container_bigger_than_the_apps_hosts_them() -> None:
    # kubelet: the init container takes two whole cards, the app container reuses one of them
    p = pod([{"nvidia.com/gpu": "2"}], [{"nvidia.com/gpu": "1"}])
    plan = initplan.plan(p)
    assert [c.name for c in plan.placed] == ["i0"] and plan.hosted == (("a0", "i0"),)
    st_ = state(2)
    a = Scheduler(st_).place(p)
    assert a is not None and len(a.allocation.usage()) == 2
    app = next(c for c in a.allocation.containers if c.name == "a0")
    assert len(app.devices) == 1 and app.devices[0].minor in (0, 1)
    # one whole card asked by the init container, halves by two app containers: all on that card
    p = pod([{"nvidia.com/gpu": "1"}], [share(50), share(50)])
    a = Scheduler(state(1)).place(p)
    assert a is not None and [(u.core_milli, u.slots) for u in a.allocation.usage()] == [(1000, 2)]


def test_neither_covers_the_other_the_pod_holds_both() -> None:
    # bytes and a ratio do not compare: each is placed on devices of its own (never less than needed)
    p = pod([{K + "gpu-core": "30", K + "gpu-memory": "4Gi"}], [share(20)])
    plan = initplan.plan(p)
    assert {c.name for c in plan.placed} == {"a0", "i0"} and plan.hosted == ()


def test_a_sidecar_keeps_its_devices() -> None:
    p = pod([share(30)], [share(50)], sidecar=True)
    assert p.init_containers[0].restartable
    a = Scheduler(state(1)).place(p)
    assert a is not None and [u.core_milli for u in a.allocation.usage()] == [800]


@settings(max_examples=60, deadline=None)
@given(init=st.lists(st.sampled_from([10, 30, 50, 100, 200]), min_size=1, max_size=3),
       apps=st.lists(st.sampled_from([10, 20, 50, 100]), min_size=1, max_size=3))
def test_the_pod_holds_at_least_each_phase_and_never_more_than_both(init: list[int], apps: list[int]) -> None:
    """On every card the pod holds at least what its app containers hold together, and at least what
    each init container holds; in all, never more than every container's ask added up."""
    p = pod([share(v) if v < 100 else {"nvidia.com/gpu": str(v // 100)} for v in init],
            [share(v) if v < 100 else {"nvidia.com/gpu": "1"} for v in apps])
    a = Scheduler(state(4)).place(p)
    if a is None:
        return
    usage = {u.minor: u.core_milli for u in a.allocation.usage()}
    for c in a.allocation.containers:
        for g in c.devices:
            assert usage[g.minor] >= g.core_milli
    app_sum: dict[int, int] = {}
    for c in a.allocation.containers:
        if not c.init:
            for g in c.devices:
                app_sum[g.minor] = app_sum.get(g.minor, 0) + g.core_milli
    assert all(usage[m] >= v for m, v in app_sum.items())
    asked = sum(v * 10 for v in init) + sum(v * 10 for v in apps)
    assert sum(usage.values()) <= asked
    assert all(v <= 1000 for v in usage.values())
