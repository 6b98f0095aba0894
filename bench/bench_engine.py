"""Fit + score of one pod over 1,000 and 5,000 nodes of 8 GPUs at 50% occupancy.

    .venv/bin/python bench/bench_engine.py [--nodes 1000,5000] [--repeat 100]

Prints per-pod latency (median, p99) of Scheduler.place (every node filtered and scored, the best
chosen, the allocation built) for: a single-card share, a whole card, 4 whole cards on nodes that
publish a bandwidth matrix (topology), and a 3-container pod that goes through the DFS. *steady*:
each pod is placed and reserved, so one node changes between two pods; *cold*: every per-node answer
(the whole evaluations and the policy's) is emptied before each pod. Then the DFS alone on seed 000's
case: 16 containers on one node of 16 half-used cards.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import msgspec
import numpy as np

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.device import DeviceInfo, NodeDevices
from devshare.model.node import node_info_from_labels
from devshare.model.request import ContainerRequest, DeviceRequest, PodRequest

GiB = 2**30
# DGX-1 V100-like matrix: NVLink pairs fast, the rest over PCIe/QPI
NV = {(0, 1), (0, 2), (0, 3), (0, 4), (1, 2), (1, 3), (1, 5), (2, 3), (2, 6), (3, 7), (4, 5), (4, 6), (4, 7), (5, 6),
      (5, 7), (6, 7)}
MATRIX = [[0.0 if i == j else (48.0 if (min(i, j), max(i, j)) in NV else 16.0) for j in range(8)] for i in range(8)]


def build(n_nodes: int, seed: int = 1) -> ClusterState:
    rng = np.random.default_rng(seed)
    st = ClusterState()
    records = Lifecycle(Scheduler(st))  # every record changes through the one cache
    for n in range(n_nodes):
        name = f"node-{n:05d}"
        st.upsert_node(node_info_from_labels(name))
        devs = tuple(DeviceInfo(type="gpu", minor=i, id=f"GPU-{n}-{i}", memory=80 * GiB) for i in range(8))
        st.set_devices(NodeDevices(node=name, devices=devs, gpu_bandwidth=tuple(tuple(r) for r in MATRIX)))
        # 50% occupancy: half the cards hold something, from a sliver to the whole card
        for i in range(8):
            if rng.random() < 0.5:
                core = int(rng.choice([250, 500, 750, 1000, 1000]))
                mem = core * 80 * GiB // 1000
                pod = PodRequest(namespace="bench", name=f"b-{n}-{i}", containers=(ContainerRequest(name="c"),))
                grant = DeviceGrant(type="gpu", minor=i, core_milli=core, memory=mem)
                records.add_watched(pod, PodAllocation(node=name, containers=(
                    ContainerAllocation(name="c", devices=(grant,)),)), checked=False)
    return st


def pod_of(*asks: DeviceRequest) -> PodRequest:
    return PodRequest(namespace="bench", name="p", containers=tuple(
        ContainerRequest(name=f"c{i}", devices=(a,)) for i, a in enumerate(asks)))


CASES = {
    "1 card, 30% + 6 GiB": pod_of(DeviceRequest(type="gpu", core_milli=300, memory=6 * GiB)),
    "1 whole card": pod_of(DeviceRequest(type="gpu", core_milli=1000, memory_ratio_milli=1000)),
    "4 whole cards, topology": pod_of(DeviceRequest(type="gpu", count=4, core_milli=1000, memory_ratio_milli=1000)),
    "3 containers (DFS)": pod_of(*(DeviceRequest(type="gpu", core_milli=200, memory=4 * GiB) for _ in range(3))),
}


def bench_dfs_16() -> None:
    """Seed 000's DFS alone: 16 containers (1 or 2 cards each) on one node of 16 half-used cards."""
    from devshare.engine.search import Need, search

    rng = np.random.default_rng(7)
    n = 16
    used = rng.choice([0, 250, 500], size=n)
    needs = [Need(i, 1 + i % 2, int(rng.choice([50, 100, 150])), np.full(n, GiB, np.int64), False)
             for i in range(16)]
    times, nodes = [], 0
    for _ in range(5):
        t0 = time.perf_counter()
        res = search(1000 - used, 80 * GiB - used * 80 * GiB // 1000, np.full(n, 16), np.full(n, 1000),
                     np.full(n, 80 * GiB), np.ones(n, bool), used == 0, needs, core_weight=0.5, binpack=True)
        times.append((time.perf_counter() - t0) * 1000)
        assert res is not None
        nodes = res.nodes
    print(f"DFS, 16 containers on 16 cards: median {statistics.median(times):.1f} ms, {nodes} search nodes "
          f"({'exhaustive' if res.exhaustive else 'budget reached, best found kept'})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="1000,5000")
    ap.add_argument("--repeat", type=int, default=100)
    args = ap.parse_args()
    print("steady: each pod is placed and reserved, so one node changes between pods (per-node answers of")
    print("the others are reused); cold: the per-node answers are emptied before every pod.")
    print(f"{'nodes':>6}  {'request':<26} {'steady median':>14} {'p99 ms':>8} {'cold median':>12} {'p99 ms':>8}")
    for n in (int(x) for x in args.nodes.split(",")):
        st = build(n)
        sch = Scheduler(st)
        lifecycle = Lifecycle(sch)
        for label, pod in CASES.items():
            repeat = args.repeat if "DFS" not in label else max(5, args.repeat // 10)
            sch.place(pod)  # warm the topology memo
            figures = []
            for cold in (False, True):
                times = []
                for i in range(repeat):
                    if cold:  # every per-node answer: the whole evaluations and the policy's
                        st.caches.clear("evaluations")
                        st.caches.clear("policy answers")
                    t0 = time.perf_counter()
                    placed = sch.place(pod)
                    times.append((time.perf_counter() - t0) * 1000)
                    assert placed is not None
                    p = msgspec.structs.replace(pod, name=f"p-{label}-{cold}-{i}")
                    lifecycle.assume(p, placed.allocation, now=0.0, ttl=math.inf)
                times.sort()
                figures += [statistics.median(times), times[min(len(times) - 1, int(0.99 * len(times)))]]
            print(f"{n:>6}  {label:<26} {figures[0]:>14.2f} {figures[1]:>8.2f} {figures[2]:>12.2f} {figures[3]:>8.2f}")
    bench_dfs_16()


if __name__ == "__main__":
    main()
