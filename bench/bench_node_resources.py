"""What knowing every node's CPU and memory costs the extender (issue 41): the informer counting the
requests of every bound pod, whoever placed it, and the filter judging nodes whose CPU is tracked.

A cluster of N nodes of 8 GPUs (128 cores, 1 TiB each, allocatable on the Node objects) holding P bound
pods: a quarter hold a devshare allocation (a share of one GPU), the rest ask for no device (placed by
kube-scheduler's default profile: the pods devshare did not count before). Measured, in process:

- the list at start: ``WatchedCluster.listed`` of every pod, and the state's memory (tracemalloc);
- one watch event of a pod bound elsewhere (counted on its node: the work added per event);
- the filter's evaluation of a 30% + 6 GiB share over every node, nodes' CPU tracked or not (with
  it untracked, as before issue 41, the CPU-aware parts of the policy see no CPU).

    .venv/bin/python bench/bench_node_resources.py              # 1,000 and 5,000 nodes, 4 pods a node
    .venv/bin/python bench/bench_node_resources.py --nodes 5000 --pods-per-node 8
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import time
import tracemalloc
from typing import Any

import msgspec

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.engine.watched import WatchedCluster
from devshare.model.request import ContainerRequest, DeviceRequest, PodRequest

GiB = 2**30


def objects(nodes: int, per_node: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes + Devices, and the bound pods."""
    cluster: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for n in range(nodes):
        name = f"node-{n:05d}"
        res = {"cpu": "128", "memory": "1Ti", "pods": "110"}
        cluster.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                        "status": {"allocatable": res, "capacity": res}})
        cluster.append({"apiVersion": "devshare.io/v1alpha1", "kind": "Device", "metadata": {"name": name},
                        "spec": {"devices": [{"type": "gpu", "minor": m, "id": f"GPU-{n}-{m}", "health": True,
                                              "resources": {"koordinator.sh/gpu-core": "100",
                                                            "koordinator.sh/gpu-memory": "80Gi",
                                                            "koordinator.sh/gpu-memory-ratio": "100"}}
                                             for m in range(8)]}})
        for k in range(per_node):
            pod: dict[str, Any] = {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"p-{n}-{k}", "namespace": "bench", "uid": f"uid-{n}-{k}",
                             "resourceVersion": "1"},
                "spec": {"nodeName": name, "containers": [{"name": "main", "image": "x", "resources": {
                    "requests": {"cpu": "4", "memory": "16Gi"}}}]},
                "status": {"phase": "Running"}}
            if k == 0:  # a share devshare placed: its allocation annotation
                pod["spec"]["containers"][0]["resources"]["limits"] = {"koordinator.sh/gpu-core": "30",
                                                                       "koordinator.sh/gpu-memory": "6Gi"}
                pod["metadata"]["annotations"] = {"devshare.io/allocation": json.dumps({
                    "node": name, "containers": [{"name": "main", "devices": [
                        {"type": "gpu", "minor": 0, "id": f"GPU-{n}-0", "core": 30, "memory": 6 * GiB,
                         "memoryRatio": 0}]}]})}
            pods.append(pod)
    return cluster, pods


def listed(cluster: list[dict[str, Any]], pods: list[dict[str, Any]],
           track: bool) -> tuple[WatchedCluster, float, int]:
    """The engine's watched cluster of the objects, listed as at start: seconds for the pods' list, and the bytes the
    list left held (a second list of the same objects, under tracemalloc, which slows what it traces)."""
    out: list[Any] = []
    for traced in (False, True):
        sync = WatchedCluster(Lifecycle(Scheduler(ClusterState())), clock=time.monotonic, track_node_resources=track)
        sync.listed("nodes", [o for o in cluster if o["kind"] == "Node"], initial=True)
        sync.listed("devices", [o for o in cluster if o["kind"] == "Device"], initial=True)
        gc.collect()
        if traced:
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            sync.listed("pods", pods, initial=True)
            out.append(tracemalloc.get_traced_memory()[0] - before)
            tracemalloc.stop()
        else:
            t0 = time.perf_counter()
            sync.listed("pods", pods, initial=True)
            out += [sync, time.perf_counter() - t0]
    return out[0], out[1], out[2]


def event_us(sync: WatchedCluster, node: str, repeat: int) -> float:
    """Median microseconds of one watch event: a new pod bound elsewhere (counted on its node), then
    its deletion."""
    times = []
    for i in range(repeat):
        obj = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"new-{i}", "namespace": "bench", "uid": f"new-{i}", "resourceVersion": "2"},
               "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x",
                                                          "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}
        t0 = time.perf_counter()
        sync.changed("pods", "ADDED", obj)
        times.append(time.perf_counter() - t0)
        sync.changed("pods", "DELETED", obj)
    return statistics.median(times) * 1e6


def filter_ms(lifecycle: Lifecycle, repeat: int) -> float:
    """Median milliseconds of the filter's evaluation of a 30% + 6 GiB share over every node, the pod
    placed after each (one node changes between two pods, as in the extender)."""
    sch, state = lifecycle.scheduler, lifecycle.state
    ask = PodRequest(namespace="bench", name="x", cpu_milli=4000, memory_bytes=16 * GiB, containers=(
        ContainerRequest(name="main", devices=(DeviceRequest(type="gpu", core_milli=300, memory=6 * GiB),)),))
    rows = state.node_rows()
    times = []
    for i in range(repeat):
        pod = msgspec.structs.replace(ask, name=f"x-{i}")
        t0 = time.perf_counter()
        sch.evaluate(pod, rows)
        times.append(time.perf_counter() - t0)
        placed = sch.place(pod)
        if placed is not None:
            lifecycle.assume(pod, placed.allocation, now=0.0, ttl=math.inf)
    return statistics.median(times) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="1000,5000")
    ap.add_argument("--pods-per-node", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    print(f"{'nodes':>6} {'pods':>7} {'CPU tracked':>11} {'list ms':>8} {'state MiB':>9} {'event us':>9} "
          f"{'filter ms':>9}")
    for n in (int(x) for x in args.nodes.split(",")):
        cluster, pods = objects(n, args.pods_per_node)
        for track in (False, True):
            sync, seconds, held = listed(cluster, pods, track)
            ev = event_us(sync, "node-00000", args.repeat)
            fm = filter_ms(sync.lifecycle, args.repeat // 4)
            print(f"{n:>6} {len(pods):>7} {'yes' if track else 'no':>11} {seconds * 1000:>8.0f} "
                  f"{held / 2**20:>9.1f} {ev:>9.1f} {fm:>9.2f}", flush=True)


if __name__ == "__main__":
    main()
