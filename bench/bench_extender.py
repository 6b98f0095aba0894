"""Benchmark: the extender end to end over HTTP, as kube-scheduler drives it.

Generates a cluster file of N nodes with 8 GPUs each and P pending pods, starts
``devshare extender --cluster FILE`` in a subprocess, and plays kube-scheduler with
``nodeCacheCapable: true``: for each pod in turn, ``/filter`` (all N node names, or with
``--sample K`` K of them as kube-scheduler's percentageOfNodesToScore sends them: the next K nodes
of a window that rotates through the node list, in a shuffled order since kube-scheduler collects
them from parallel workers) then ``/prioritize`` over the nodes that passed, then ``/bind`` to the best node,
binds running in the background while the next pod is filtered (kube-scheduler binds
asynchronously; its bind request goes out before the next pod's extender filter, since kube-scheduler
first runs its own filter plugins over every node). A bind refused because the devices were taken
puts the pod back in the queue. Prints pods bound per second and p50/p99 latency per verb (client side).

    python bench/bench_extender.py                 # 1,000 and 5,000 nodes
    python bench/bench_extender.py --nodes 5000 --pods 3000 --sample 500
    python bench/bench_extender.py --profile       # in-process, cProfile of the engine calls
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import operator
import os
import pstats
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import numpy as np
import yaml

GiB = 2**30
MAX_TRIES = 3  # scheduling attempts per pod (a bind refused because an earlier pod took the devices)


def make_cluster(nodes: int, pods: int, seed: int, uniform: bool = False) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    objs: list[dict[str, Any]] = []
    for i in range(nodes):
        name = f"node-{i:05d}"
        objs.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        objs.append({
            "apiVersion": "devshare.io/v1alpha1", "kind": "Device", "metadata": {"name": name},
            "spec": {"devices": [
                {"type": "gpu", "minor": m, "id": f"GPU-{i}-{m}", "health": True,
                 "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi",
                               "koordinator.sh/gpu-memory-ratio": "100"}}
                for m in range(8)]},
        })
    for j in range(pods):
        r = rng.random()
        if uniform:  # bench_e2e's pods: one whole GPU each, all alike
            limits = {"nvidia.com/gpu": "1"}
        elif r < 0.15:
            limits = {"nvidia.com/gpu": str(rng.choice([1, 2, 4]))}
        else:
            limits = {"koordinator.sh/gpu-core": str(rng.choice([10, 20, 25, 50])),
                      "koordinator.sh/gpu-memory": f"{rng.choice([2, 4, 8, 16])}Gi"}
        objs.append({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": f"pod-{j:05d}", "namespace": "bench", "uid": f"uid-{j}",
                                  # the version the server's store gives it (one write per object, in order)
                                  "resourceVersion": str(2 * nodes + j + 1)},
                     # devshare's scheduler, as the webhook sets it: the extender keeps the pod from its watch
                     "spec": {"schedulerName": "devshare-scheduler",
                              "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]}})
    return objs


class Sampler:
    """The candidate lists kube-scheduler sends: every node, or a rotating window of ``sample``.

    kube-scheduler's window walks its own node list. ``order="names"``: that list is in the nodes'
    name order, the extender's own row order (one zone, the scheduler started after the nodes were
    made). ``"shuffled"``: a fixed order unrelated to the names, as in bench_e2e.py's cluster, whose
    nodes are made in parallel (its real windows, captured, each spread over the whole name range
    and coming back every 10 pods at 5,000 nodes): the extender's caches then see other windows."""

    def __init__(self, names: list[str], sample: int | None, seed: int, order: str = "names") -> None:
        self.names = names
        self.arr = np.array(names, dtype=object)
        if order == "shuffled":
            self.arr = self.arr[np.random.default_rng([seed, 2]).permutation(len(names))]
        self.sample = sample
        self.start = 0
        self.rng = np.random.default_rng(seed)

    def next(self) -> list[str]:
        if not self.sample:
            return self.names
        idx = (self.start + self.rng.permutation(self.sample)) % len(self.names)
        self.start = (self.start + self.sample) % len(self.names)
        return list(self.arr[idx].tolist())


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000 if s else float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class FilterResult(msgspec.Struct):
    NodeNames: msgspec.Raw = msgspec.Raw(b"null")  # passed on to prioritize as they came, as raw JSON
    FailedNodes: dict[str, str] = {}
    Error: str = ""


class HostPriority(msgspec.Struct):
    Host: str
    Score: int


class BindResult(msgspec.Struct):
    Error: str = ""


class Conn:
    """One keep-alive HTTP/1.1 connection, one request at a time. The bench client's own cost is
    on the measured path (the filter of the next pod waits for it), so it does what kube-scheduler's
    Go client does and no more: no per-request session machinery, bodies written as bytes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.r, self.w = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> Conn:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def post(self, path: bytes, body: bytes) -> tuple[int, bytes]:
        self.w.write(b"POST %s HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (path, len(body), body))
        head = await self.r.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        at = head.lower().find(b"content-length:")
        if at < 0:
            raise RuntimeError(f"{path!r}: no Content-Length in the answer: {head[:200]!r}")
        length = int(head[at + 15: head.index(b"\r\n", at)])
        return status, await self.r.readexactly(length)

    def close(self) -> None:
        self.w.close()


def best_host(raw: bytes) -> str:
    """The first node with the highest score of a HostPriorityList (JSON bytes). The scores are
    0..10: the first ``"Score":s}`` from 10 down is found in the bytes, and its Host read back."""
    for s in range(10, -1, -1):
        i = raw.find(b'"Score":%d}' % s)
        if i >= 0:
            start = raw.rfind(b'{"Host":', 0, i)
            if start >= 0:
                return str(msgspec.json.decode(raw[start + 8: i].rstrip(b", ")))
            break
    scores = msgspec.json.decode(raw, type=list[HostPriority])  # another layout: decode it all
    return max(scores, key=operator.attrgetter("Score")).Host


async def drive(host: str, port: int, pods: list[dict[str, Any]], node_names: list[str], sample: int | None,
                seed: int, order: str = "names") -> dict[str, Any]:
    """Play kube-scheduler: one pod at a time through filter and prioritize, binds in the background."""
    sampler = Sampler(node_names, sample, seed, order)
    lat: dict[str, list[float]] = {"filter": [], "prioritize": [], "bind": []}
    enc = msgspec.json.encode
    filter_answer = msgspec.json.Decoder(FilterResult)
    bind_answer = msgspec.json.Decoder(BindResult)
    all_names = enc(node_names)
    pod_bodies = [enc(p) for p in pods]  # kube-scheduler holds them already (its informer cache)
    bound = unschedulable = bind_errors = failed = 0
    queue = deque(range(len(pods)))  # pod indexes; a refused bind puts its pod back, as kube-scheduler does
    tries = [0] * len(pods)
    binds: set[asyncio.Task[None]] = set()
    idle: list[Conn] = []  # keep-alive connections for binds

    async def call(conn: Conn, verb: str, body: bytes) -> bytes:
        t = time.perf_counter()
        status, raw = await conn.post(b"/" + verb.encode(), body)
        if status != 200:
            raise RuntimeError(f"{verb}: HTTP {status}: {raw[:200]!r}")
        lat[verb].append(time.perf_counter() - t)
        return raw

    async def bind(k: int, node: str) -> None:
        nonlocal bound, bind_errors
        m = pods[k]["metadata"]
        conn = idle.pop() if idle else await Conn.open(host, port)
        raw = await call(conn, "bind", enc({"PodName": m["name"], "PodNamespace": m["namespace"],
                                            "PodUID": m["uid"], "Node": node}))
        idle.append(conn)
        if bind_answer.decode(raw).Error:
            bind_errors += 1
            if tries[k] < MAX_TRIES:
                queue.append(k)
        else:
            bound += 1

    main = await Conn.open(host, port)
    started = time.perf_counter()
    while queue or binds:
        if not queue:  # the last pods' binds are in flight: one may be refused and come back
            await asyncio.wait(binds, return_when=asyncio.FIRST_COMPLETED)
            continue
        k = queue.popleft()
        tries[k] += 1
        pod_raw = pod_bodies[k]
        names = sampler.next()
        names_raw = all_names if names is node_names else enc(names)
        out = filter_answer.decode(await call(main, "filter", b'{"Pod":%s,"Nodes":null,"NodeNames":%s}'
                                              % (pod_raw, names_raw)))
        failed += len(out.FailedNodes)
        fit = bytes(out.NodeNames)
        if fit in (b"null", b"[]"):
            unschedulable += 1
            continue
        if b'","' in fit:  # more than one node passed (node names hold no quotes or commas)
            target = best_host(await call(main, "prioritize", b'{"Pod":%s,"Nodes":null,"NodeNames":%s}'
                                          % (pod_raw, fit)))
        else:  # kube-scheduler skips prioritize when one node is left
            target = msgspec.json.decode(fit, type=list[str])[0]
        task = asyncio.create_task(bind(k, target))
        binds.add(task)
        task.add_done_callback(binds.discard)
        # kube-scheduler starts the binding goroutine, then runs the next pod's own filter plugins
        # over every node before it calls the extender: the bind request goes out first
        await asyncio.sleep(0)
    wall = time.perf_counter() - started
    for c in [main, *idle]:
        c.close()
    return {"wall": wall, "bound": bound, "unschedulable": unschedulable, "bind_errors": bind_errors, "lat": lat,
            "failed": failed / max(1, sum(tries))}


def run_http(nodes: int, pods: int, sample: int | None, seed: int, policy: str | None,
             extra: list[str] | None = None, uniform: bool = False, order: str = "names") -> None:
    objs = make_cluster(nodes, pods, seed, uniform)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cluster.yaml"
        t = time.perf_counter()
        path.write_text(yaml.dump_all(objs, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), sort_keys=False))
        port = free_port()
        profile = os.environ.get("SERVER_PROFILE")  # a file: the server runs under cProfile and writes it
        wrap = ["-m", "cProfile", "-o", profile] if profile else []
        proc = subprocess.Popen(
            [sys.executable, *wrap, "-m", "devshare.cli.main", "extender", "--cluster", str(path), "--port", str(port),
             "--log-level", "warning", *(["--policy", policy] if policy else []), *(extra or [])],
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            asyncio.run(wait_ready(f"http://127.0.0.1:{port}", proc))
            ready = time.perf_counter() - t
            pod_objs = [o for o in objs if o["kind"] == "Pod"]
            names = [o["metadata"]["name"] for o in objs if o["kind"] == "Node"]
            server_cpu, client_cpu = cpu_seconds(proc.pid), time.process_time()
            res = asyncio.run(drive("127.0.0.1", port, pod_objs, names, sample, seed, order))
            server_cpu, client_cpu = cpu_seconds(proc.pid) - server_cpu, time.process_time() - client_cpu
        finally:
            proc.terminate()
            proc.wait(30)
    lat = res["lat"]
    asked = f"{sample} names of a rotating window" if sample else f"all {nodes} names"
    print(f"\n== {nodes} nodes x 8 GPUs, {pods} pods, filter with {asked} (nodeCacheCapable), "
          f"policy {policy or 'default'}{' ' + ' '.join(extra) if extra else ''} ==")
    print(f"startup (write file, load, sync): {ready:.1f} s")
    done = max(1, res["bound"])
    print(f"end to end: {done / res['wall']:.0f} pods bound/s ({res['wall']:.2f} s); bound {res['bound']}, "
          f"unschedulable {res['unschedulable']}, binds refused {res['bind_errors']} (pod retried, as "
          f"kube-scheduler does, up to {MAX_TRIES} tries), FailedNodes per filter {res['failed']:.0f}")
    print(f"CPU per pod bound: server {server_cpu / done * 1000:.2f} ms, client {client_cpu / done * 1000:.2f} ms "
          f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs: other work slows the wall-clock figures)")
    for verb in ("filter", "prioritize", "bind"):
        xs = lat[verb]
        print(f"  {verb:<10} n={len(xs):<5} p50 {pct(xs, 0.5):6.2f} ms  p99 {pct(xs, 0.99):6.2f} ms  "
              f"max {max(xs) * 1000 if xs else float('nan'):6.2f} ms")


async def wait_ready(base: str, proc: subprocess.Popen[bytes]) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(6000):
            if proc.poll() is not None:
                raise RuntimeError(f"the extender exited with {proc.returncode}")
            try:
                async with http.get(f"{base}/readyz") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("the extender did not become ready")


def run_profile(nodes: int, pods: int, sample: int | None, seed: int, policy: str | None,
                uniform: bool = False, deployed: bool = False, order: str = "names") -> None:
    """The same calls without the HTTP transport, in-process, under cProfile: where the time goes
    (request bodies as bytes through the app's verb handlers, so decoding and encoding count)."""
    from devshare.kube.memory import MemoryBackend
    from devshare.server.extender import app as handlers
    from devshare.server.extender.serve import RUNTIME, ExtenderOptions, build_app

    objs = make_cluster(nodes, pods, seed, uniform)
    backend = MemoryBackend.from_objects(objs)
    names = [o["metadata"]["name"] for o in objs if o["kind"] == "Node"]
    pod_objs = [o for o in objs if o["kind"] == "Pod"]
    sampler = Sampler(names, sample, seed, order)
    enc = msgspec.json.encode
    filter_answer = msgspec.json.Decoder(FilterResult)

    async def main() -> None:
        if deployed:  # deploy/'s configuration file, as the Deployment mounts it (shortlist: 1)
            from devshare.config import load_config

            path = Path(__file__).resolve().parents[1] / "deploy/scheduler/config/devshare-config.yaml"
            options = ExtenderOptions(config=load_config(path))
        else:
            from devshare.config import Configuration, with_overrides

            options = ExtenderOptions(config=with_overrides(Configuration(), policy=policy) if policy else None)
        app = build_app(backend, options)
        for hook in app.on_startup:
            await hook(app)
        rt = app[RUNTIME]
        await rt.informer.synced.wait()
        gc.collect()
        gc.freeze()  # as the server does once synced
        ext = rt.extender

        spent: dict[str, list[float]] = {"filter": [], "prioritize": [], "bind": []}

        async def call(verb: str, body: Any) -> Any:
            data = enc(body)
            t = time.perf_counter()
            answer, _ = await getattr(handlers, f"_{verb}")(ext, data)
            answer = answer if isinstance(answer, bytes) else enc(answer)
            spent[verb].append(time.perf_counter() - t)
            return answer

        prof = cProfile.Profile() if os.environ.get("SORT") != "none" else None
        t = time.perf_counter()
        if prof is not None:
            prof.enable()
        for p in pod_objs:
            ns = sampler.next()
            fr = filter_answer.decode(await call("filter", {"Pod": p, "Nodes": None, "NodeNames": ns}))
            fit = msgspec.json.decode(bytes(fr.NodeNames), type=list[str] | None) or []
            if not fit:
                continue
            target = fit[0]
            if len(fit) > 1:
                target = best_host(await call("prioritize", {"Pod": p, "Nodes": None, "NodeNames": fit}))
            m = p["metadata"]
            await call("bind", {"PodName": m["name"], "PodNamespace": m["namespace"], "Node": target,
                                "PodUID": m["uid"]})
        wall = time.perf_counter() - t
        print(f"\n== profile: {nodes} nodes, {pods} pods, policy {policy or 'default'}, in-process: "
              f"{pods / wall:.0f} pods/s ==")
        for verb, xs in spent.items():  # handler time: decode, verb, encode (no transport)
            print(f"  {verb:<10} n={len(xs):<5} p50 {pct(xs, 0.5):6.2f} ms  p99 {pct(xs, 0.99):6.2f} ms")
        if prof is not None:
            prof.disable()
            top = int(os.environ.get("TOP", "30"))
            pstats.Stats(prof).sort_stats(os.environ.get("SORT", "cumulative")).print_stats(top)
        for hook in app.on_cleanup:
            await hook(app)

    asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, action="append", help="node count (repeatable; default 1000 and 5000)")
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--sample", type=int, default=None,
                    help="node names per filter: a rotating window (kube-scheduler's percentageOfNodesToScore)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--profile", action="store_true", help="in-process under cProfile instead of over HTTP")
    ap.add_argument("--policy", default=None,
                    help="the extender's --policy (devshare, binpack, spread); default: the extender's own default")
    ap.add_argument("--extender-arg", action="append", default=[],
                    help="passed on to devshare extender (repeatable), e.g. --extender-arg=--no-claim-ledger")
    ap.add_argument("--order", choices=("names", "shuffled"), default="names",
                    help="kube-scheduler's node list, which --sample's window walks: in name order, or shuffled "
                         "(bench_e2e's cluster; see Sampler)")
    ap.add_argument("--uniform", action="store_true", help="every pod asks nvidia.com/gpu: 1 (bench_e2e's pods)")
    ap.add_argument("--deployed", action="store_true",
                    help="--profile with deploy/'s configuration file (shortlist: 1)")
    args = ap.parse_args()
    for n in args.nodes or [1000, 5000]:
        if args.profile:
            run_profile(n, args.pods, args.sample, args.seed, args.policy, args.uniform, args.deployed, args.order)
        else:
            run_http(n, args.pods, args.sample, args.seed, args.policy, args.extender_arg, args.uniform, args.order)
    print(json.dumps({"note": "client-side latencies include HTTP and JSON on both sides"}))


if __name__ == "__main__":
    main()
