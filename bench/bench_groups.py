"""Planning a pod group (seed 003) over a large cluster.

    .venv/bin/python bench/bench_groups.py [--nodes 1000] [--busy 0.5] [--repeat 20]

Builds N nodes of 8 GPUs with the seed's bandwidth matrix; a fraction ``--busy`` of the nodes has
a random number (1..8) of its GPUs taken by other pods. Then, for each case, times:

- layout: :func:`devshare.engine.groups.layout.plan_layout` alone (capacities over every node, the fewest
  nodes with least left over, max-bottleneck GPU sets on each chosen node);
- plan: :meth:`GroupPlanner.assign` of the first member on a fresh planner (layout + holding every
  member's devices in the state under placeholders), undone after each run;
- all members: assign + claim of every member (a gang: the last claim binds them all).

Cases: 16 pods x 8 GPUs (the issue's job), 16 pods x 4 GPUs, 32 pods x 1 GPU, 8 pods x 2 GPUs.
Prints median and p99 in milliseconds, and the nodes each plan uses.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from devshare.engine.groups import Bind, GroupPlanner, MemberPlacement, plan_layout
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.device import DeviceInfo, NodeDevices
from devshare.model.node import node_info_from_labels
from devshare.model.request import ContainerRequest, DeviceRequest, GroupRef, PodRequest

GiB = 2**30
SEED_MATRIX = Path(__file__).resolve().parents[1] / ".." / "shared" / "topologies" / "seed-8gpu-bandwidth.json"


def matrix() -> tuple[tuple[float, ...], ...]:
    for p in (SEED_MATRIX, Path(__file__).resolve().parents[1] / "examples/topologies/seed-8gpu-bandwidth.json"):
        if p.exists():
            return tuple(tuple(float(x) for x in r) for r in json.loads(p.read_text())["bandwidth_gbps"])
    return tuple(tuple(700.0 if i == j else 48.0 for j in range(8)) for i in range(8))


def build(n_nodes: int, busy: float, seed: int = 7) -> ClusterState:
    rng = np.random.default_rng(seed)
    st = ClusterState()
    records = Lifecycle(Scheduler(st))  # every record changes through the one cache
    m = matrix()
    for n in range(n_nodes):
        name = f"node-{n:05d}"
        st.upsert_node(node_info_from_labels(name))
        devs = tuple(DeviceInfo(type="gpu", minor=i, id=f"GPU-{n}-{i}", memory=80 * GiB) for i in range(8))
        st.set_devices(NodeDevices(node=name, devices=devs, gpu_bandwidth=m))
        if rng.random() < busy:
            taken = rng.choice(8, size=int(rng.integers(1, 9)), replace=False)
            grants = tuple(DeviceGrant(type="gpu", minor=int(i), core_milli=1000, memory=80 * GiB,
                                       memory_ratio_milli=1000) for i in taken)
            p = PodRequest(namespace="bench", name=f"busy-{n}", containers=(
                ContainerRequest(name="c", devices=(DeviceRequest(type="gpu", count=len(grants), core_milli=1000,
                                                                   memory_ratio_milli=1000),)),))
            alloc = PodAllocation(node=name, containers=(ContainerAllocation(name="c", devices=grants),))
            records.add_watched(p, alloc, checked=False)
    return st


def member(i: int, replicas: int, gpus: int, gang: bool) -> PodRequest:
    ref = GroupRef(name="job", replicas=replicas, gang_name="job" if gang else None,
                   min_available=replicas if gang else None)
    return PodRequest(namespace="bench", name=f"job-{i}", group=ref, containers=(
        ContainerRequest(name="main", devices=(DeviceRequest(type="gpu", count=gpus, core_milli=1000,
                                                             memory_ratio_milli=1000),)),))


def timed(fn: Callable[[], object], undo: Callable[[], None], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
        undo()
    return out


def fmt(xs: list[float]) -> str:
    xs = sorted(xs)
    p99 = xs[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]
    return f"median {statistics.median(xs):8.2f} ms  p99 {p99:8.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--busy", type=float, default=0.5)
    ap.add_argument("--repeat", type=int, default=20)
    a = ap.parse_args()
    t0 = time.perf_counter()
    st = build(a.nodes, a.busy)
    sch = Scheduler(st)
    rows = st.node_rows()
    free = int(((st.tables["gpu"].used_core[rows] == 0) & st.tables["gpu"].present[rows]).sum())
    print(f"{a.nodes} nodes x 8 GPUs, {free} GPUs free, built in {time.perf_counter() - t0:.2f} s")
    for replicas, gpus in [(16, 8), (16, 4), (32, 1), (8, 2)]:
        case(st, sch, replicas, gpus, a.repeat)


def case(st: ClusterState, sch: Scheduler, replicas: int, gpus: int, repeat: int) -> None:
    rows = st.node_rows()
    first = member(0, replicas, gpus, gang=True)
    layout = plan_layout(sch, first, replicas, rows)
    lay = timed(lambda: plan_layout(sch, first, replicas, rows), lambda: None, repeat)
    holder: dict[str, GroupPlanner] = {}

    def plan_first() -> None:
        holder["p"] = GroupPlanner(sch)
        r = holder["p"].assign(first, now=0.0)
        assert isinstance(r, MemberPlacement)

    def undo() -> None:
        holder["p"].expire(1e18)

    def everyone() -> None:
        holder["p"] = p = GroupPlanner(sch)
        d: object = None
        for i in range(replicas):
            d = p.schedule(member(i, replicas, gpus, gang=True), now=0.0)
        assert isinstance(d, Bind) and len(d.members) == replicas

    def unbind() -> None:
        for i in range(replicas):
            holder["p"].lifecycle.release(f"bench/job-{i}")
        holder["p"].plans.clear()

    plan = timed(plan_first, undo, repeat)
    full = timed(everyone, unbind, max(3, repeat // 4))
    print(f"{replicas:3d} pods x {gpus} GPUs on {len(layout.nodes):2d} node(s), {layout.leftover:g} GPUs left on "
          f"them\n    layout      {fmt(lay)}\n    plan+hold   {fmt(plan)}\n    all members {fmt(full)}")

if __name__ == "__main__":
    main()
