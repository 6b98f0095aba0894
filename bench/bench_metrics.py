"""The extender's /metrics at scale: how long the families over every device take to write, and how
big a scrape is, at N nodes of G GPUs with a pod on every other node's first card.

    python bench/bench_metrics.py [--nodes 5000] [--gpus 8] [--rounds 5]

Prints the scrape's size and lines, and the best and median time of ``device_families`` (run in a
thread by the extender, off the event loop) and of the registry's own families (on the loop).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from prometheus_client import generate_latest

from devshare.engine.quotas import Quota, Quotas
from devshare.engine.state import ClusterState
from devshare.server.extender.metrics import ExtenderMetrics, device_families
from devshare.server.extender.view import Unelected
from support.cluster import GiB, add_node, bound


class Synced:
    synced = True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    state = ClusterState()
    for i in range(args.nodes):
        add_node(state, f"node-{i:05d}", [80 * GiB] * args.gpus)
    for i in range(0, args.nodes, 2):
        bound(state, f"p{i}", f"node-{i:05d}", 0, core=300, memory=6 * GiB, ns=f"team-{i % 50}")
    metrics = ExtenderMetrics()
    metrics.watch_state(state, Synced(), Unelected(), quotas=Quotas({f"team-{i}": Quota(core_milli=10_000)
                                                                   for i in range(50)}))  # type: ignore[arg-type]
    families, registry = [], []
    for _ in range(args.rounds):
        t = time.perf_counter()
        cols = state.device_columns()
        out = device_families(cols, state.max_containers)
        families.append(time.perf_counter() - t)
        t = time.perf_counter()
        head = generate_latest(metrics.registry)
        registry.append(time.perf_counter() - t)
    whole = asyncio.run(metrics.exposition())
    lines = whole.count(b"\n")
    print(f"{args.nodes} nodes x {args.gpus} GPUs: scrape {len(whole) / 1e6:.1f} MB, {lines} lines "
          f"(per-device families {len(out) / 1e6:.1f} MB, registry {len(head) / 1e3:.0f} kB)")
    for name, times in (("device families (thread)", families), ("registry (event loop)", registry)):
        print(f"{name}: best {min(times) * 1000:.0f} ms, median {statistics.median(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
