"""Groups and gangs (seed 003) through the extender over real HTTP: filter passes the planned node,
bind claims the planned devices, a gang binds every member at its quorum, and a gang that cannot
complete binds nobody and gives its devices back when its plan expires."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest

from devshare.kube.errors import Unavailable
from devshare.kube.memory import MemoryBackend
from devshare.model.codecs import decode_allocation
from devshare.model.device import DeviceInfo, NodeDevices, device_object
from support import REPO
from support.extender import FlakyBackend, GiB, bind, names_body, node, pod, post, running, settle
from support.waiting import eventually as until

TOPOLOGIES = REPO / "examples" / "topologies"
SEED = json.loads((TOPOLOGIES / "seed-8gpu-bandwidth.json").read_text())
TOPOLOGY = "topology.scheduling.koordinator.sh/gpu"


def matrix_device(name: str) -> dict[str, Any]:
    devs = tuple(DeviceInfo(type="gpu", minor=i, id=f"GPU-{name}-{i}", memory=16 * GiB) for i in range(8))
    bw = tuple(tuple(float(x) for x in row) for row in SEED["bandwidth_gbps"])
    return device_object(NodeDevices(node=name, devices=devs, gpu_bandwidth=bw))


def member(i: int, *, replicas: int, gpus: int = 2, gang: int | None = None, group: str = "job") -> dict[str, Any]:
    annotations = ({"gang.scheduling.koordinator.sh/name": group,
                    "gang.scheduling.koordinator.sh/min-available": str(gang)} if gang else None)
    p = pod(f"{group}-{i}", gpus=gpus, annotations=annotations)
    p["metadata"]["labels"] = {"gputopology.scheduling.koordinator.sh/name": group,
                               "gputopology.scheduling.koordinator.sh/replica": str(replicas)}
    return p


def backend_of(nodes: list[str], pods: list[dict[str, Any]]) -> MemoryBackend:
    objs: list[dict[str, Any]] = []
    for n in nodes:
        objs += [node(n), matrix_device(n)]
    return MemoryBackend.from_objects([*objs, *pods])


async def schedule(client: Any, p: dict[str, Any], nodes: list[str]) -> str:
    """Play kube-scheduler for one pod: filter, prioritize (when several pass), bind the best."""
    out = await post(client, "/filter", names_body(p, nodes))
    fit = out["NodeNames"]
    assert fit, out
    target = fit[0]
    if len(fit) > 1:
        scores = await post(client, "/prioritize", names_body(p, fit))
        target = max(scores, key=lambda h: h["Score"])["Host"]
    return await bind(client, p["metadata"]["name"], target)


async def stored(backend: MemoryBackend, name: str) -> dict[str, Any]:
    obj = await backend.get_pod("default", name)
    assert obj is not None
    return obj


async def test_two_pod_group_gets_gpus_0_to_3_on_the_seed_matrix() -> None:
    pods = [member(0, replicas=2), member(1, replicas=2)]
    backend = backend_of(["host04", "host05"], pods)
    async with running(backend) as (client, runtime):
        out = await post(client, "/filter", names_body(pods[0], ["host04", "host05", "ghost"]))
        assert len(out["NodeNames"]) == 1
        planned = out["NodeNames"][0]
        assert "planned on node" in out["FailedNodes"][{"host04", "host05"}.difference([planned]).pop()]
        assert "not known" in out["FailedAndUnresolvableNodes"]["ghost"]
        scores = await post(client, "/prioritize", names_body(pods[0], ["host04", "host05"]))
        assert {h["Host"]: h["Score"] for h in scores}[planned] == 10
        assert sorted(h["Score"] for h in scores) == [0, 10]
        assert await bind(client, "job-0", planned) == ""
        assert await schedule(client, pods[1], ["host04", "host05"]) == ""
        await settle(runtime, backend)
        minors: list[int] = []
        for name in ("job-0", "job-1"):
            obj = await stored(backend, name)
            assert obj["spec"]["nodeName"] == planned
            ann = obj["metadata"]["annotations"]
            topo = json.loads(ann[TOPOLOGY])
            assert topo["visibleGPUs"] == ["0", "1", "2", "3"]
            alloc = decode_allocation(ann)
            assert alloc is not None and alloc.node == planned
            minors += [g.minor for _, g in alloc.grants()]
            assert runtime.state.pods[f"default/{name}"].phase == "bound"
        assert sorted(minors) == SEED["expected"]["seed_example"]["better"] == [0, 1, 2, 3]
        assert not [k for k in runtime.state.pods if "#plan#" in k]  # every placeholder was claimed


async def test_gang_binds_every_member_when_the_last_needed_one_binds() -> None:
    pods = [member(i, replicas=3, gang=3) for i in range(3)]
    backend = backend_of(["host04"], pods)
    async with running(backend) as (client, runtime):
        for i in (0, 1):
            error = await schedule(client, pods[i], ["host04"])
            assert f"{i + 1} of 3 members have their devices" in error
            assert (await stored(backend, f"job-{i}"))["spec"].get("nodeName") is None
        assert await schedule(client, pods[2], ["host04"]) == ""
        await settle(runtime, backend)
        visible = set()
        for i in range(3):
            obj = await stored(backend, f"job-{i}")
            assert obj["spec"]["nodeName"] == "host04"
            visible.add(obj["metadata"]["annotations"][TOPOLOGY])
            assert runtime.state.pods[f"default/job-{i}"].phase == "bound"
        assert len({json.dumps(json.loads(v)["visibleGPUs"]) for v in visible}) == 1
        # kube-scheduler retries a member the extender already bound: the same answer, success
        assert await bind(client, "job-0", "host04") == ""


async def test_gang_that_cannot_complete_binds_nobody_and_releases_after_expiry() -> None:
    pods = [member(i, replicas=3, gang=3) for i in range(3)]
    backend = backend_of(["host04"], pods)
    now = [0.0]
    async with running(backend, clock=lambda: now[0]) as (client, runtime):
        ext = runtime.extender
        for i in (0, 1):  # the third member never comes
            assert "members have their devices" in await schedule(client, pods[i], ["host04"])
        assert len(runtime.state.pods) == 3  # two claimed members and the third's placeholder hold their GPUs
        now[0] = 60.0
        ext.expire()
        assert len(runtime.state.pods) == 3  # the plan still holds
        now[0] = 1000.0
        ext.expire()
        assert runtime.state.pods == {}
        for i in range(3):
            assert (await stored(backend, f"job-{i}"))["spec"].get("nodeName") is None
        # the devices are free again: an ordinary pod can take all eight
        out = await post(client, "/filter", names_body(pod("big", gpus=8), ["host04"]))
        assert out["NodeNames"] == ["host04"]


async def test_gang_too_large_for_the_cluster_holds_nothing() -> None:
    pods = [member(i, replicas=3, gpus=4, gang=3) for i in range(3)]
    backend = backend_of(["host04"], pods)
    async with running(backend) as (client, runtime):
        out = await post(client, "/filter", names_body(pods[0], ["host04"]))
        assert out["NodeNames"] == []
        assert "the gang needs 3 together" in out["FailedNodes"]["host04"]
        assert await bind(client, "job-0", "host04") != ""
        assert runtime.state.pods == {}
        assert (await stored(backend, "job-0"))["spec"].get("nodeName") is None


async def test_gang_member_whose_binding_fails_is_bound_on_the_next_bind() -> None:
    pods = [member(i, replicas=2, gang=2) for i in range(2)]
    backend = backend_of(["host04"], pods)
    async with running(backend) as (client, runtime):
        assert "1 of 2" in await schedule(client, pods[0], ["host04"])
        real_bind = backend.bind_pod
        failing = {"default/job-0"}

        async def flaky(namespace: str, name: str, node_name: str, *, uid: str | None = None,
                        **kw: Any) -> None:
            if f"{namespace}/{name}" in failing:
                raise Unavailable("injected: the API server is away")
            await real_bind(namespace, name, node_name, uid=uid, **kw)

        backend.bind_pod = flaky  # type: ignore[method-assign]
        assert await schedule(client, pods[1], ["host04"]) == ""  # the asker binds; job-0's binding failed
        assert (await stored(backend, "job-1"))["spec"]["nodeName"] == "host04"
        assert (await stored(backend, "job-0"))["spec"].get("nodeName") is None
        assert runtime.state.pods["default/job-0"].phase == "bound"  # the gang's decision stands
        failing.clear()
        assert await bind(client, "job-0", "host04") == ""  # kube-scheduler's retry binds it
        await settle(runtime, backend)
        assert (await stored(backend, "job-0"))["spec"]["nodeName"] == "host04"
        assert runtime.extender.groups.unbound == {}


async def test_deleted_member_gives_back_its_place() -> None:
    pods = [member(i, replicas=2, gang=2) for i in range(2)]
    backend = backend_of(["host04"], pods)
    async with running(backend) as (client, runtime):
        assert "1 of 2" in await schedule(client, pods[0], ["host04"])
        assert runtime.state.pods["default/job-0"].phase == "assumed"
        backend.delete("pods", "default/job-0")
        await until(lambda: "default/job-0" not in runtime.state.pods)
        assert "default/job-0" not in runtime.state.pods
        plan = runtime.extender.groups.planner.plans["default/job"]
        assert plan.slot_of("default/job-0") is None


async def test_failed_member_binding_is_retried_by_any_later_bind() -> None:
    pods = [member(i, replicas=2, gang=2) for i in range(2)]
    other = pod("solo", gpus=1)
    backend = backend_of(["host04", "host05"], [*pods, other])
    async with running(backend) as (client, runtime):
        assert "1 of 2" in await schedule(client, pods[0], ["host04", "host05"])
        real_bind = backend.bind_pod
        failing = {"default/job-0"}

        async def flaky(namespace: str, name: str, node_name: str, *, uid: str | None = None,
                        **kw: Any) -> None:
            if f"{namespace}/{name}" in failing:
                raise Unavailable("injected")
            await real_bind(namespace, name, node_name, uid=uid, **kw)

        backend.bind_pod = flaky  # type: ignore[method-assign]
        assert await schedule(client, pods[1], ["host04", "host05"]) == ""
        assert set(runtime.extender.groups.unbound) == {"default/job-0"}
        failing.clear()
        assert await schedule(client, other, ["host04", "host05"]) == ""  # another pod's bind retries it
        planned = runtime.state.pods["default/job-0"].allocation.node
        assert (await stored(backend, "job-0"))["spec"]["nodeName"] == planned
        assert runtime.extender.groups.unbound == {}


@pytest.mark.parametrize("seed", range(6))
async def test_random_gangs_are_never_partly_bound(seed: int) -> None:
    """Two gangs and a plain group arrive interleaved, binds fail at random, kube-scheduler retries;
    in the state every gang is all bound or not at all, and once the failures stop every member of
    a bound gang gets bound through the API."""
    rng = random.Random(seed)
    jobs = {"a": (3, 3), "b": (2, 2), "c": (2, None)}  # name: (replicas, min-available or plain)
    pods = [member(i, replicas=r, gpus=rng.choice([1, 2]) if g is None else 2, gang=g, group=name)
            for name, (r, g) in jobs.items() for i in range(r)]
    for p in pods:  # members of one group must be identical
        grp = p["metadata"]["labels"]["gputopology.scheduling.koordinator.sh/name"]
        p["spec"] = next(q for q in pods
                         if q["metadata"]["labels"]["gputopology.scheduling.koordinator.sh/name"] == grp)["spec"]
    inner = backend_of(["host04", "host05"], pods)
    flaky = FlakyBackend(inner, fail_rate=0.3, seed=seed)
    nodes = ["host04", "host05"]
    async with running(flaky) as (client, runtime):
        queue = list(pods)
        rng.shuffle(queue)
        for _ in range(6):  # kube-scheduler's retries
            for p in queue:
                out = await post(client, "/filter", names_body(p, nodes))
                if out["NodeNames"]:
                    await bind(client, p["metadata"]["name"], out["NodeNames"][0])
                check_all_or_nothing(runtime, jobs)
        flaky.fail_rate = 0.0
        for p in queue:
            obj = await stored(inner, p["metadata"]["name"])
            if obj["spec"].get("nodeName") is None:
                out = await post(client, "/filter", names_body(p, nodes))
                if out["NodeNames"]:
                    await bind(client, p["metadata"]["name"], out["NodeNames"][0])
        await settle(runtime, inner)
        check_all_or_nothing(runtime, jobs)
        for name, (replicas, _) in jobs.items():
            keys = [f"default/{name}-{i}" for i in range(replicas)]
            in_state = [k for k in keys if k in runtime.state.pods and runtime.state.pods[k].phase == "bound"]
            api = [k for k in keys if (await stored(inner, k.split("/")[1]))["spec"].get("nodeName")]
            assert sorted(api) == sorted(in_state), (name, api, in_state)
            assert len(api) == replicas, (name, api)  # everything fits: every member ends up bound
        assert not [k for k in runtime.state.pods if "#plan#" in k]


def check_all_or_nothing(runtime: Any, jobs: dict[str, tuple[int, int | None]]) -> None:
    for name, (replicas, gang) in jobs.items():
        if gang is None:
            continue
        phases = [runtime.state.pods[k].phase if k in runtime.state.pods else None
                  for k in (f"default/{name}-{i}" for i in range(replicas))]
        assert phases.count("bound") in (0, replicas), (name, phases)


# ---- a plan holds devices only for pods that exist (issue 12) ----

async def test_a_filter_for_a_pod_that_does_not_exist_holds_nothing() -> None:
    """One /filter for a pod that does not exist, labelled as a group of 4 x 4 GPUs, held all 16 GPUs
    of the cluster for the plan's 120 s."""
    ghost = member(0, replicas=4, gpus=4, group="ghost")
    backend = backend_of(["host04", "host05"], [])  # 16 GPUs; the pod is never created
    async with running(backend) as (client, runtime):
        out = await post(client, "/filter", names_body(ghost, ["host04", "host05"]))
        assert out["NodeNames"] == []
        assert "pod default/ghost-0 (uid uid-default-ghost-0) does not exist in the API server" in \
            out["FailedNodes"]["host04"]
        scores = await post(client, "/prioritize", names_body(ghost, ["host04", "host05"]))
        assert {h["Score"] for h in scores} == {0}
        assert runtime.state.pods == {} and runtime.extender.groups.planner.plans == {}
        # every GPU is still free: a pod asking for 8 whole GPUs fits on either node
        big = pod("big", gpus=8)
        backend.store.put("pods", "default/big", big)
        await settle(runtime, backend)
        out = await post(client, "/filter", names_body(big, ["host04", "host05"]))
        assert sorted(out["NodeNames"]) == ["host04", "host05"]


class LaggingPods:
    """The memory backend with its pod watch ``lag`` seconds late (kube-scheduler saw a new pod
    before the extender's watch did)."""

    def __init__(self, inner: MemoryBackend, lag: float) -> None:
        self.inner = inner
        self.lag = lag

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def watch(self, kind: Any, resource_version: str) -> Any:
        async for ev in self.inner.watch(kind, resource_version):
            if kind == "pods":
                await asyncio.sleep(self.lag)
            yield ev


async def test_a_member_the_watch_has_not_seen_yet_is_read_from_the_api_server() -> None:
    backend = backend_of(["host04"], [])
    async with running(LaggingPods(backend, lag=30.0)) as (client, runtime):
        first = member(0, replicas=2, gpus=2)
        backend.store.put("pods", "default/job-0", first)  # created; the extender's watch is late
        out = await post(client, "/filter", names_body(first, ["host04"]))
        assert out["NodeNames"] == ["host04"], out
        assert "default/job" in runtime.extender.groups.planner.plans


async def test_the_plan_of_a_group_whose_pods_are_all_gone_is_dropped_with_its_holds() -> None:
    pods = [member(i, replicas=4, gpus=4, group="big") for i in range(2)]
    backend = backend_of(["host04", "host05"], pods)
    async with running(backend) as (client, runtime):
        out = await post(client, "/filter", names_body(pods[0], ["host04", "host05"]))
        assert out["NodeNames"], out
        held = [k for k in runtime.state.pods if "#plan#" in k]
        assert len(held) == 4  # every member's devices are held, under the plan's placeholders
        backend.delete("pods", "default/big-0")
        await until(lambda: "default/big-0" not in runtime.cluster.pods_present)
        assert "default/big" in runtime.extender.groups.planner.plans  # big-1 still exists: it may come
        backend.delete("pods", "default/big-1")
        await until(lambda: "default/big-1" not in runtime.cluster.pods_present)
        assert runtime.extender.groups.planner.plans == {} and runtime.state.pods == {}


async def test_holds_for_members_that_vanished_unseen_are_dropped_by_the_periodic_check() -> None:
    pods = [member(0, replicas=4, gpus=4, group="big")]
    backend = backend_of(["host04", "host05"], pods)
    async with running(backend) as (client, runtime):
        assert (await post(client, "/filter", names_body(pods[0], ["host04", "host05"])))["NodeNames"]
        assert runtime.state.pods
        runtime.cluster._absent("default/big-0")  # as if its deletion was never seen (a re-list lost it)
        runtime.extender.expire()
        assert runtime.extender.groups.planner.plans == {} and runtime.state.pods == {}
