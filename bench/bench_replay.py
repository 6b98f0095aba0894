"""Live packing: the openb trace replayed through a real control plane with devshare installed from
deploy/, beside ``devshare simulate``'s figure for the same nodes and seeds.

The cluster: the openb GPU nodes (1,213 by default) as Node objects whose allocatable CPU and memory
are the trace's, labelled with their GPU model, and a Device object each (every GPU 100% compute). The
control plane is tests/e2e's: etcd, kube-apiserver and kube-scheduler v1.37, devshare's extender run as
deploy/scheduler runs it (its ServiceAccount, deploy/'s configuration file, following its
kube-scheduler's Lease).

The replay follows the FGD paper's protocol (shared/traces/openb/README.md), with devshare's own
``arrival_order``: pods sorted, shuffled by the seed, inflated with clones to 130% of the cluster's
GPU; one pod at a time: created, then waited for until it is bound or found unschedulable (then it is
deleted and counted as skipped). Allocation % is recorded at every integer arrived %; the headline is
the unallocated % when the arrived workload reaches 100%. Each seed starts from an empty cluster with a
fresh extender and kube-scheduler.

Pods ask as users would: a share of one GPU ``koordinator.sh/gpu-core`` + ``koordinator.sh/gpu-memory-ratio``
(both the trace's milli-GPU / 10), whole GPUs ``nvidia.com/gpu``, all with the trace's CPU and memory and
``schedulerName: devshare-scheduler``. Pods asking for no GPU go to devshare-scheduler too, or with
``--cpu-pods default-scheduler`` to a second kube-scheduler with the default profile, as in a cluster
where devshare schedules only GPU pods; the extender's leader then marks the nodes with a free GPU
(``scheduling.steerOtherPods``, on in deploy/; ``--no-steer``: off), and each seed starts once every
node carries the mark. The simulator's figure is then its model of that cluster (sim/online.py).

``--nodes N`` takes N nodes: the first N of the trace's (shuffled once by seed 0) when N is smaller,
the trace's nodes repeated when larger (``-r1``, ``-r2``, ... suffixes); the pods are inflated to 130% of
that cluster either way, so the trace scales with it. ``--until P`` stops each seed at P% arrived (100
by default; 130 is the paper's whole curve).

``--uniform PODS`` measures something else: ``--nodes`` nodes of 8 GPUs and PODS pods asking
``nvidia.com/gpu: 1``, all created before kube-scheduler starts (as bench_e2e.py does), and reports
how many nodes the pods ended on against the ideal ``ceil(PODS / 8)``.

The last line is one JSON object: ``{"trace", "nodes", "seeds", "cpu_pods", "until",
"live_unallocated_pct": {seed: x}, "sim_unallocated_pct": {seed: x}, "live_mean", "sim_mean",
"pods_per_s", "skipped": {seed: {"gpu_share", "gpu_whole", "cpu_only"}}, "overbooked_cards",
"live_allocated_pct": {seed: [per arrived %]}, "sim_allocated_pct": {seed: [...]}}`` (with
``--uniform``: ``{"nodes", "pods", "nodes_used", "ideal", "excess_pct", "pods_per_s", "overbooked_cards"}``).

    .venv/bin/python bench/bench_replay.py                          # 1,213 nodes, seeds 42-44
    .venv/bin/python bench/bench_replay.py --cpu-pods default-scheduler
    .venv/bin/python bench/bench_replay.py --nodes 200 --seeds 42   # a quick look
    .venv/bin/python bench/bench_replay.py --nodes 1000 --uniform 1000
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_e2e import NS, POD, api, create, devshare_config, start_extender

from devshare.cli.simulate import parse_seeds
from devshare.engine.steering import TAINT_KEY
from devshare.model.codecs import decode_allocation
from devshare.sim.online import replay_online
from devshare.sim.replay import MAX_ARRIVED, arrival_order, replay
from devshare.sim.runner import DEFAULT_NODES, DEFAULT_PODS, bundled, policy_for
from devshare.sim.trace import MILLI, Trace, TraceNode, TracePod, load_trace
from e2e.cluster import SCHEDULER_NAME, ControlPlane, control_plane

DEFAULT_SCHEDULER = "default-scheduler"
GPU_MEMORY = "80Gi"  # each card's memory: shares ask a ratio of it, so any size gives the same packing


# --- the cluster -----------------------------------------------------------------------------------

def scaled_nodes(trace: Trace, n: int | None) -> tuple[TraceNode, ...]:
    """``n`` nodes of the trace's: a seeded sample when fewer, the trace's nodes repeated when more."""
    nodes = trace.nodes
    if n is None or n == len(nodes):
        return nodes
    if n < len(nodes):
        order = np.random.default_rng(0).permutation(len(nodes))
        return tuple(nodes[i] for i in sorted(order[:n].tolist()))
    out = list(nodes)
    k = 1
    while len(out) < n:
        out += [TraceNode(f"{x.name}-r{k}", x.cpu_milli, x.memory_mib, x.gpus, x.model) for x in nodes]
        k += 1
    return tuple(out[:n])


def node_objects(nodes: tuple[TraceNode, ...]) -> list[dict[str, Any]]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    objects: list[dict[str, Any]] = []
    for x in nodes:
        res = {"cpu": f"{x.cpu_milli}m", "memory": f"{x.memory_mib}Mi", "pods": "10000"}
        labels = {"kubernetes.io/hostname": x.name, **({"devshare.io/gpu-model": x.model} if x.model else {})}
        objects.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": x.name, "labels": labels},
                        "status": {"capacity": res, "allocatable": res, "conditions": [
                            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench",
                             "lastHeartbeatTime": now, "lastTransitionTime": now}]}})
        if x.gpus:
            objects.append({
                "apiVersion": "devshare.io/v1alpha1", "kind": "Device", "metadata": {"name": x.name},
                "spec": {"devices": [
                    {"type": "gpu", "minor": m, "id": f"GPU-{x.name}-{m}", "health": True, "model": x.model,
                     "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": GPU_MEMORY,
                                   "koordinator.sh/gpu-memory-ratio": "100"}}
                    for m in range(x.gpus)]}})
    return objects


def pod_object(name: str, p: TracePod, cpu_scheduler: str) -> dict[str, Any]:
    """The pod a user would write for a trace pod (module docstring)."""
    res: dict[str, str] = {"cpu": f"{p.cpu_milli}m", "memory": f"{p.memory_mib}Mi"}
    limits: dict[str, str] = {}
    if p.num_gpu and p.gpu_milli >= MILLI:
        limits["nvidia.com/gpu"] = str(p.num_gpu)
    elif p.num_gpu:
        limits["koordinator.sh/gpu-core"] = str(p.gpu_milli // 10)
        limits["koordinator.sh/gpu-memory-ratio"] = str(p.gpu_milli // 10)
    meta: dict[str, Any] = {"name": name, "namespace": NS, "labels": {"bench-phase": "replay"}}
    if p.gpu_spec:
        meta["annotations"] = {"devshare.io/gpu-model": "|".join(p.gpu_spec)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"schedulerName": SCHEDULER_NAME if p.num_gpu else cpu_scheduler,
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                                     "resources": {"requests": {**res, **limits}, "limits": limits}}]}}


# --- talking to the API server ------------------------------------------------------------------------

class Api:
    """One keep-alive HTTPS connection as the admin (the bench's own requests: create, delete)."""

    def __init__(self, cp: ControlPlane) -> None:
        host, port = cp.server.removeprefix("https://").split(":")
        ctx = ssl.create_default_context(cafile=str(cp.pki / "ca.crt"))
        ctx.load_cert_chain(cp.pki / "admin.crt", cp.pki / "admin.key")
        self.conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=60)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(3):
            try:
                self.conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
                r = self.conn.getresponse()
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
            except (OSError, http.client.HTTPException):
                self.conn.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def create_pod(self, obj: dict[str, Any]) -> None:
        status, out = self.call("POST", f"/api/v1/namespaces/{NS}/pods", obj)
        if status != 201:
            raise RuntimeError(f"creating pod {obj['metadata']['name']}: {status} {out}")

    def delete_pod(self, name: str) -> None:
        status, out = self.call("DELETE", f"/api/v1/namespaces/{NS}/pods/{name}?gracePeriodSeconds=0")
        if status not in (200, 202, 404):
            raise RuntimeError(f"deleting pod {name}: {status} {out}")


class Outcomes:
    """Watches the namespace's pods: each pod's first outcome, bound (its node) or unschedulable (why)."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.outcome: dict[str, tuple[str, str]] = {}
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from lightkube.resources.core_v1 import Pod

        client = api(self.cp)
        while not self.stop.is_set():
            try:
                for _, pod in client.watch(Pod, namespace=NS):
                    name = pod.metadata.name
                    found: tuple[str, str] | None = None
                    if pod.spec.nodeName:
                        found = ("bound", pod.spec.nodeName)
                    else:
                        for c in (pod.status.conditions if pod.status and pod.status.conditions else []):
                            if c.type == "PodScheduled" and c.status == "False":
                                found = ("unschedulable", f"{c.reason}: {(c.message or '')[:300]}")
                    if found is not None:
                        with self.cond:
                            if name not in self.outcome or found[0] == "bound":
                                self.outcome[name] = found
                            self.cond.notify_all()
                    if self.stop.is_set():
                        return
            except Exception:
                time.sleep(0.2)

    def wait(self, name: str, timeout: float) -> tuple[str, str]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while name not in self.outcome:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"pod {name}: neither bound nor unschedulable after {timeout:.0f} s")
                self.cond.wait(left)
            return self.outcome[name]

    def forget(self) -> None:
        with self.cond:
            self.outcome.clear()


def clear(cp: ControlPlane) -> None:
    """Delete every pod of the namespace and wait until they are gone (the next seed starts empty). A
    deletecollection of thousands of pods may outlast its request: it is asked again until none is left."""
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        cp.kubectl("delete", "--raw", f"/api/v1/namespaces/{NS}/pods?gracePeriodSeconds=0", check=False, timeout=300)
        left = cp.kubectl("get", "pods", "-n", NS, "-o", "name", "--chunk-size=500").stdout.split()
        if not left:
            return
        time.sleep(2)
    raise TimeoutError(f"pods of {NS} still there after 900 s")


def overbooked_cards(cp: ControlPlane) -> int:
    """Cards whose pods' allocation annotations add up to more than 100% compute (from the pods, not
    from devshare's state)."""
    used: Counter[tuple[str, int]] = Counter()
    for obj in cp.get("pods", "-n", NS)["items"]:
        ann = obj["metadata"].get("annotations") or {}
        alloc = decode_allocation(ann)
        if alloc is None:
            continue
        for _, g in alloc.grants():
            used[(alloc.node, g.minor)] += g.core_milli
    return sum(1 for v in used.values() if v > MILLI)


# --- one seed ----------------------------------------------------------------------------------------

def start_schedulers(cp: ControlPlane, cpu_pods: str, window: int | None, steer: bool = True) -> None:
    """devshare's extender and kube-scheduler as deploy/ runs them (fresh: no memory of an earlier seed;
    ``window``: percentageOfNodesToScore, None as deploy/ ships it), and the default scheduler when
    CPU-only pods go to it."""
    for name in ("kube-scheduler", "kube-scheduler-default", "extender"):
        proc = cp.processes.get(name)
        if proc is not None and proc.alive:
            proc.stop()
    start_extender(cp, "devshare" if steer else "devshare-no-steer")
    cp.start_scheduler(config=devshare_config(cp, window), hostname=POD)
    if cpu_pods == DEFAULT_SCHEDULER:
        path = cp.root / "default-scheduler.yaml"
        path.write_text(yaml.safe_dump({
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "leaderElection": {"leaderElect": False},
            "clientConnection": {"kubeconfig": str(cp.admin), "qps": 500, "burst": 1000},
            "profiles": [{"schedulerName": DEFAULT_SCHEDULER}]}))
        cp.start_scheduler(config=path, name="kube-scheduler-default")


def steering_settled(cp: ControlPlane, nodes: tuple[TraceNode, ...], timeout: float = 900) -> float:
    """Wait until every node carries devshare's steering taint (an empty cluster: every GPU free), as in
    a cluster where devshare has run a while; returns the seconds waited. The leader writes 20 nodes a
    second, so 1,213 nodes take about a minute after a fresh start."""
    want = sum(1 for n in nodes if n.gpus > 0)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        items = cp.get("nodes")["items"]
        marked = sum(1 for o in items if any(t.get("key") == TAINT_KEY for t in o["spec"].get("taints") or []))
        if marked >= want:
            return time.monotonic() - t0
        time.sleep(2)
    raise TimeoutError(f"the steering taint on {marked} of {want} nodes after {timeout:.0f} s")


def kind_of(p: TracePod) -> str:
    return "cpu_only" if not p.num_gpu else "gpu_whole" if p.gpu_milli >= MILLI else "gpu_share"


def live_seed(cp: ControlPlane, http: Api, outcomes: Outcomes, trace: Trace, seed: int, args: argparse.Namespace
              ) -> dict[str, Any]:
    start_schedulers(cp, args.cpu_pods, args.window, not args.no_steer)
    if args.cpu_pods == DEFAULT_SCHEDULER and not args.no_steer:
        print(f"seed {seed}: steering taint on every node after {steering_settled(cp, trace.nodes):.0f} s",
              file=sys.stderr, flush=True)
    cap = trace.gpu_capacity
    curve: list[float] = []
    arrived = allocated = done = 0
    skipped: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    t0 = time.monotonic()
    for i, (_, p) in enumerate(arrival_order(trace, seed)):
        pct = arrived * 100 // cap
        while len(curve) <= min(pct, MAX_ARRIVED):
            curve.append(round(allocated * 100 / cap, 3))
        if pct >= args.until:
            break
        name = f"replay-{seed}-{i:06d}"
        http.create_pod(pod_object(name, p, args.cpu_pods))
        what, detail = outcomes.wait(name, args.timeout)
        if what == "bound":
            allocated += p.gpu_total
        else:
            skipped[kind_of(p)] += 1
            reasons[detail.split(":", 1)[0]] += 1
            if reasons[detail.split(":", 1)[0]] <= 2:
                print(f"{name} ({kind_of(p)}) not placed: {detail}", file=sys.stderr, flush=True)
            http.delete_pod(name)
        arrived += p.gpu_total
        done += 1
        if done % 500 == 0:
            print(f"seed {seed}: {done} pods, arrived {arrived * 100 / cap:.1f}%, allocated "
                  f"{allocated * 100 / cap:.2f}%, skipped {dict(skipped)}, {done / (time.monotonic() - t0):.1f} "
                  "pods/s", file=sys.stderr, flush=True)
    seconds = time.monotonic() - t0
    overbooked = overbooked_cards(cp)
    last = curve[min(args.until, len(curve) - 1)]
    print(f"seed {seed}: live unallocated at {args.until}% arrived: {100 - last:.2f}% "
          f"({done} pods in {seconds:.0f} s; skipped {dict(skipped)}; why: {dict(reasons)}; "
          f"cards over 100%: {overbooked})", file=sys.stderr, flush=True)
    clear(cp)
    outcomes.forget()
    return {"curve": curve, "skipped": dict(skipped), "pods": done, "seconds": seconds, "overbooked": overbooked}


def sim_seed(trace: Trace, seed: int, cpu_pods: str = SCHEDULER_NAME, steered: bool = True) -> list[float]:
    """``devshare simulate --policy devshare``'s curve for the same nodes and seed; with CPU-only pods to
    the default scheduler, the simulator's model of that cluster (sim/online.py: kube-scheduler's
    window for GPU pods, its default profile for the others, the steering taint when ``steered``)."""
    policy = policy_for("devshare", trace, seed)
    if cpu_pods == DEFAULT_SCHEDULER:
        result = replay_online(trace, policy, seed, window=0, steered=steered)
    else:
        result = replay(trace, policy, seed)
    return [round(x, 3) for x in result.allocated_pct]


def replay_main(args: argparse.Namespace) -> None:
    base = load_trace(args.nodes_csv, args.pods_csv)
    nodes = scaled_nodes(base, args.nodes)
    trace = Trace(base.name, nodes, base.pods)
    seeds = parse_seeds(args.seeds)
    print(f"{trace.name}: {len(nodes)} nodes, {sum(x.gpus for x in nodes)} GPUs; seeds {seeds}; CPU-only pods: "
          f"{args.cpu_pods}", file=sys.stderr, flush=True)
    sim: dict[int, list[float]] = {}
    if not args.no_sim:
        for seed in seeds:
            sim[seed] = sim_seed(trace, seed, args.cpu_pods, not args.no_steer)
            print(f"seed {seed}: simulated unallocated at 100%: {100 - sim[seed][100]:.2f}%", file=sys.stderr,
                  flush=True)
    live: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="devshare-bench-replay-") as tmp, control_plane(Path(tmp)) as cp:
        cp.install()
        cp.namespace(NS)
        t0 = time.monotonic()
        create(cp, node_objects(nodes))
        print(f"{len(nodes)} nodes + devices in {time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
        http, outcomes = Api(cp), Outcomes(cp)
        try:
            for seed in seeds:
                live[seed] = live_seed(cp, http, outcomes, trace, seed, args)
        finally:
            outcomes.stop.set()
    at = min(args.until, 100)
    live_un = {s: round(100 - r["curve"][min(at, len(r["curve"]) - 1)], 3) for s, r in live.items()}
    sim_un = {s: round(100 - c[at], 3) for s, c in sim.items()}
    pods = sum(r["pods"] for r in live.values())
    print(json.dumps({
        "trace": trace.name, "nodes": len(nodes), "seeds": seeds, "cpu_pods": args.cpu_pods, "until": args.until,
        "window": args.window, "steer": not args.no_steer,
        "live_unallocated_pct": live_un, "sim_unallocated_pct": sim_un,
        "live_mean": round(statistics.fmean(live_un.values()), 3),
        "sim_mean": round(statistics.fmean(sim_un.values()), 3) if sim_un else None,
        "pods_per_s": round(pods / max(sum(r["seconds"] for r in live.values()), 1e-9), 1),
        "skipped": {s: r["skipped"] for s, r in live.items()},
        "overbooked_cards": sum(r["overbooked"] for r in live.values()),
        "live_allocated_pct": {s: r["curve"] for s, r in live.items()},
        "sim_allocated_pct": {s: c[: at + 1] for s, c in sim.items()},
    }))


# --- the uniform workload ------------------------------------------------------------------------------

def uniform_main(args: argparse.Namespace) -> None:
    n = args.nodes or 1000
    nodes = tuple(TraceNode(f"u-{i:05d}", 128000, 1 << 20, 8, "") for i in range(n))
    with tempfile.TemporaryDirectory(prefix="devshare-bench-replay-") as tmp, control_plane(Path(tmp)) as cp:
        cp.install()
        cp.namespace(NS)
        create(cp, node_objects(nodes))
        whole = TracePod("u", 1000, 1024, 1, MILLI)
        create(cp, [pod_object(f"u-{i:05d}", whole, SCHEDULER_NAME) for i in range(args.uniform)])
        outcomes = Outcomes(cp)
        t0 = time.monotonic()
        start_schedulers(cp, SCHEDULER_NAME, args.window)
        names = [f"u-{i:05d}" for i in range(args.uniform)]
        try:
            where = [outcomes.wait(name, args.timeout + t0 - time.monotonic()) for name in names]
        finally:
            outcomes.stop.set()
        seconds = time.monotonic() - t0
        used = {d for what, d in where if what == "bound"}
        ideal = math.ceil(args.uniform / 8)
        bound = sum(1 for w, _ in where if w == "bound")
        out = {"nodes": n, "pods": args.uniform, "window": args.window, "bound": bound,
               "nodes_used": len(used), "ideal": ideal, "excess_pct": round(100 * (len(used) - ideal) / ideal, 2),
               "pods_per_s": round(args.uniform / seconds, 1), "overbooked_cards": overbooked_cards(cp)}
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=None, help="nodes in the cluster (default: the trace's 1,213)")
    ap.add_argument("--seeds", default="42-44")
    ap.add_argument("--until", type=int, default=100, help="stop each seed at this arrived %% (100; 130: all)")
    ap.add_argument("--cpu-pods", choices=(SCHEDULER_NAME, DEFAULT_SCHEDULER), default=SCHEDULER_NAME,
                    help="who schedules the pods that ask for no GPU")
    ap.add_argument("--nodes-csv", type=Path, default=bundled(DEFAULT_NODES))
    ap.add_argument("--pods-csv", type=Path, default=bundled(DEFAULT_PODS))
    ap.add_argument("--no-sim", action="store_true", help="leave out the simulator's figures")
    ap.add_argument("--no-steer", action="store_true",
                    help="the extender with scheduling.steerOtherPods off (deploy/ turns it on)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds a pod may take to be decided")
    ap.add_argument("--window", type=int, default=None,
                    help="devshare-scheduler's percentageOfNodesToScore (default: as deploy/ ships it, adaptive)")
    ap.add_argument("--uniform", type=int, default=0,
                    help="instead: this many nvidia.com/gpu: 1 pods on --nodes nodes of 8 GPUs, created at once")
    args = ap.parse_args()
    if not 1 <= args.until <= MAX_ARRIVED:
        raise SystemExit(f"--until: an arrived % from 1 to {MAX_ARRIVED}")
    if args.nodes is not None and args.nodes < 1:
        raise SystemExit("--nodes: at least 1")
    if args.uniform:
        uniform_main(args)
    else:
        replay_main(args)


if __name__ == "__main__":
    main()
