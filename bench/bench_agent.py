"""The node agent's cost per kubelet Allocate call (issue 13: identical replicas).

A node with P pending pods of one Deployment (identical: one container asking 30% of a card through
``koordinator.sh/gpu-core`` and ``gpu-memory-ratio``, two Allocate calls per pod), admitted the way
kubelet admits them: one pod at a time, a call per resource, kubelet's checkpoint written after the
container. Three orders:

- ``distinct``: the pods are not identical (each asks another amount): every call is matched
  unambiguously (the baseline);
- ``in-order``: identical, kubelet admits them in binding order: every first call is served by a
  stand-in that turns out right (a handout journaled, resolved, no trade);
- ``reverse``: identical, admitted last bound first: every stand-in is wrong, every pod trades
  (two annotation writes plus the mark).

With ``--preferred`` each Allocate is preceded, as kubelet does when the plugin offers it, by a
``GetPreferredAllocation`` (``Allocator.preferred``: the same matching, nothing recorded), and both
are timed together.

Measured around ``Allocator.allocate`` only (the agent's work: listing the node's pods from an
in-memory API, reading kubelet's checkpoint, matching, journaling, the writes it owes), not the gRPC
transport nor kubelet's side. CPU is ``time.process_time``; wall includes the journal's fsync.
The last line is JSON: per order, pods, calls, CPU and wall microseconds per call, trades.

    .venv/bin/python bench/bench_agent.py --pods 8 32 110
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from devshare.agent.deviceplugin.allocator import Allocator
from devshare.agent.fake import FakeBackend
from devshare.agent.resources import resource_named
from devshare.model.dialects.koordinator_names import KOORD_GPU_CORE, KOORD_GPU_MEMORY_RATIO
from support.agent import MemoryClient, gpu, pod, write_fake

CORE, RATIO = resource_named(KOORD_GPU_CORE), resource_named(KOORD_GPU_MEMORY_RATIO)
assert CORE and RATIO


def run(n: int, order: str, root: Path, preferred: bool = False) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(dir=root))  # a fresh agent: no journal of an earlier run
    fake = write_fake(tmp / "n.yaml", gpus=8, memory="80Gi")
    inv = FakeBackend(fake, node="n1").discover()
    pods = []
    for i in range(n):
        share = 30 if order != "distinct" else 1 + i % 99
        p = pod(f"r{i}", "n1", [("main", {KOORD_GPU_CORE: share, KOORD_GPU_MEMORY_RATIO: share},
                                 [gpu(i % 8, inv.gpus[i % 8].uuid, share * 10, 0, share * 10)])], uid=f"uid-{i}")
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "True",
                                      "lastTransitionTime": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"}]
        pods.append(p)
    client = MemoryClient(pods)
    checkpoint = tmp / f"kubelet-{order}-{n}"
    checkpoint.write_text(json.dumps({"Data": {"PodDeviceEntries": []}}))
    try:
        allocator = Allocator("n1", client, lambda: inv, resources=[CORE.name, RATIO.name], checkpoint=checkpoint,
                              journal=tmp / f"agent-{order}-{n}.json")
    except TypeError:  # an agent from before identical replicas (to compare the distinct order)
        allocator = Allocator("n1", client, lambda: inv, resources=[CORE.name, RATIO.name], checkpoint=checkpoint)
    entries: list[dict[str, Any]] = []
    admitted = list(range(n)) if order != "reverse" else list(range(n))[::-1]
    cpu = wall = 0.0
    calls = 0
    for i in admitted:
        share = 30 if order != "distinct" else 1 + i % 99
        for res in (CORE, RATIO):
            ids = [f"{res.short}-{i}-{k}" for k in range(share)]
            c0, w0 = time.process_time(), time.perf_counter()
            if preferred:
                allocator.preferred(res, [(ids, [], share)])
            allocator.allocate(res, [ids])
            cpu += time.process_time() - c0
            wall += time.perf_counter() - w0
            calls += 1
            entries.append({"PodUID": f"uid-{i}", "ContainerName": "main", "ResourceName": res.name,
                            "DeviceIDs": {"0": ids}})
        checkpoint.write_text(json.dumps({"Data": {"PodDeviceEntries": entries}}))  # kubelet, after the container
    c0, w0 = time.process_time(), time.perf_counter()
    if hasattr(allocator, "tick"):
        allocator.tick()  # the last pod's resolution
    cpu += time.process_time() - c0
    wall += time.perf_counter() - w0
    assigned = sum(1 for p in client.pods.values() if p["metadata"]["annotations"].get("devshare.io/assigned"))
    assert assigned == n, (order, assigned)
    return {"order": order, "pods": n, "calls": calls, "cpu_us_per_call": round(cpu / calls * 1e6, 1),
            "wall_us_per_call": round(wall / calls * 1e6, 1), "trades": getattr(allocator, "trades", 0)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pods", type=int, nargs="+", default=[8, 32, 110])
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; the fastest is kept")
    ap.add_argument("--orders", nargs="+", default=["distinct", "in-order", "reverse"])
    ap.add_argument("--preferred", action="store_true", help="a GetPreferredAllocation before each Allocate")
    ap.add_argument("--dir", default=None, help="where the journal and kubelet's checkpoint are written "
                    "(default: the system's temporary folder)")
    args = ap.parse_args()
    out = []
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        for n in args.pods:
            for order in args.orders:
                best = min((run(n, order, Path(d), args.preferred) for _ in range(args.repeat)),
                           key=lambda r: r["cpu_us_per_call"])
                print(f"{n:4d} pods  {order:9s} {best['calls']:4d} calls  {best['cpu_us_per_call']:8.1f} us CPU/call "
                      f"{best['wall_us_per_call']:8.1f} us wall/call  trades {best['trades']}")
                out.append(best)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
