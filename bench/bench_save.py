"""Benchmark: bind latency of ``devshare extender --cluster FILE --save FILE`` (issue 12).

Writes a cluster file of 250 nodes x 8 GPUs and 2,000 pending pods, starts the extender on it with
``--save`` in a subprocess, and binds ``--binds`` of the pods one after the other (no filter: bind
chooses the devices itself; pod i goes to node i mod 250) while a second client polls ``/healthz``
every 10 ms. ``--clients N``: N binds in flight at once (they share the file's writes: group commit).
Prints the bind latency (p50/p99/max), binds per second and the worst ``/healthz`` latency seen,
then checks that the saved file loads and holds every bind.

    python bench/bench_save.py                      # 2,000 pods, 200 binds, one at a time
    python bench/bench_save.py --clients 8          # 8 binds in flight at once
    PYTHONPATH=/path/to/old/src python bench/bench_save.py --binds 50   # an older devshare
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from bench_extender import make_cluster


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def poll_health(base: str, stop: asyncio.Event, worst: list[float]) -> None:
    async with aiohttp.ClientSession() as http:
        while not stop.is_set():
            t = time.perf_counter()
            async with http.get(f"{base}/healthz") as r:
                await r.read()
            worst.append(time.perf_counter() - t)
            await asyncio.sleep(0.01)


async def run(base: str, names: list[str], binds: int, clients: int) -> tuple[list[float], list[float], int, float]:
    async with aiohttp.ClientSession() as http:
        for _ in range(600):
            try:
                async with http.get(f"{base}/readyz") as r:
                    if r.status == 200:
                        break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
        stop = asyncio.Event()
        health: list[float] = []
        poller = asyncio.create_task(poll_health(base, stop, health))
        lat: list[float] = []
        errors = [0]

        async def client(first: int) -> None:  # binds pods first, first + clients, ... one after the other
            for i in range(first, binds, clients):
                name = names[i]
                body = {"PodName": name, "PodNamespace": "bench", "PodUID": f"uid-{int(name[4:])}", "Node": ""}
                t = time.perf_counter()
                # pods spread round-robin over the nodes (the next node when one does not fit)
                for k in range(250):
                    body["Node"] = f"node-{(i + k) % 250:05d}"
                    async with http.post(f"{base}/bind", json=body) as r:
                        status = r.status
                        err = (await r.json()).get("Error", "") if status == 200 else "http"
                    if status != 200:
                        errors[0] += 1
                        break
                    if not err or "does not fit" not in err:
                        break
                lat.append(time.perf_counter() - t)

        started = time.perf_counter()
        await asyncio.gather(*(client(c) for c in range(clients)))
        wall = time.perf_counter() - started
        stop.set()
        await poller
    return lat, health, errors[0], wall


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--binds", type=int, default=200)
    ap.add_argument("--clients", type=int, default=1, help="binds in flight at once (kube-scheduler binds "
                    "several pods at a time: they share the file's writes)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "cluster.yaml"
        objs = make_cluster(250, args.pods, seed=7)
        f.write_text(yaml.safe_dump_all(objs, sort_keys=False))
        names = [o["metadata"]["name"] for o in objs if o["kind"] == "Pod"]
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "devshare.cli.main", "extender", "--cluster", str(f), "--save", str(f),
             "--port", str(port), "--log-level", "warning"],
            stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            lat, health, errors, wall = asyncio.run(run(f"http://127.0.0.1:{port}", names, args.binds, args.clients))
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=120)
        saved = [d for d in yaml.load_all(f.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if d]
        bound = sum(1 for d in saved if d["kind"] == "Pod" and d["spec"].get("nodeName"))
    ms = np.array(lat) * 1000
    print(f"{args.pods} pods in the file, {len(lat)} binds ({errors} HTTP errors), saved file holds {bound} bound")
    print(f"bind ms: p50 {np.percentile(ms, 50):.1f}  p99 {np.percentile(ms, 99):.1f}  max {ms.max():.1f}"
          f"  ({args.clients} client(s): {len(lat) / wall:.1f} binds/s)")
    print(f"/healthz worst {max(health) * 1000:.1f} ms over {len(health)} probes")
    if proc.returncode not in (0, -15):
        print(err.decode()[-2000:])


if __name__ == "__main__":
    main()
