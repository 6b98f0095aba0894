"""DRA side by side on the real control plane (issue 38): stock kube-scheduler's own DRA allocator against
devshare allocating the claims, on a sample of the openb cluster, under FGD's protocol.

    .venv/bin/python bench/bench_dra.py [--nodes 100] [--seeds 42,43,44] [--sample-seed 0] [--stop-at 100]

What it does, per seed (the same seeds for both, the same node sample for every seed):

- a fresh set of the sampled openb nodes (Node objects with the trace's CPU and memory; Device objects
  with the trace's GPUs and model), and their ResourceSlices (driver gpu.devshare.io, published by the
  extender's DRA controller from the Device objects);
- the openb default trace in FGD's order (sorted, shuffled by the seed, inflated with clones to 130%
  of the sample's GPUs: ``devshare.sim.replay.arrival_order``), placed one pod at a time until
  ``--stop-at`` % has arrived. A GPU pod asks its share through a ResourceClaim (``compute`` in percent
  of a card, ``count`` cards, the model constraint as a CEL selector); a CPU-only pod asks no claim.
  Each pod is waited for: bound, or found unplaceable (kube-scheduler's PodScheduled=False
  Unschedulable; devshare's FailedDRAAllocation event), then deleted with its claim;
- **stock**: every pod goes to a kube-scheduler of its own (default profile, no extender) and the
  claim's DeviceClass is not devshare's, so no gate: kube-scheduler's DynamicResources allocates (first
  fit by device index, node by LeastAllocated + BalancedAllocation);
- **devshare**: every pod goes to devshare's scheduler (deploy/'s profile, which asks the extender
  about all its pods), the claim asks ``gpu.devshare.io``: the webhook gates the pod, devshare's
  allocator chooses node and devices with the extender's engine and policy, kube-scheduler binds; a
  CPU-only pod is placed by the extender. The extender
  is restarted before each seed's phase (its policy learns online; each seed starts afresh, as in the
  simulator).

Reported per seed: GPU allocation % when 100% of the sample's GPUs has arrived (bound pods' GPUs over
the sample's), hence unallocated %; pods/s of each phase (pods processed over its wall time); devices
whose claims consume more than their capacity (counted from the claims). ``sim_unallocated_pct``:
``devshare simulate``'s devshare policy on the same sample and seeds (devshare places every pod, as
here). Printed beside it: ``devshare.sim.online`` (CPU-only pods left to stock kube-scheduler, as in a
cluster whose CPU-only pods do not use devshare's scheduler) and the ``dra-baseline`` policy. The last
line is one JSON object:
``{"nodes", "seeds", "stock_unallocated_pct": {seed: x}, "devshare_unallocated_pct": {seed: x},
"sim_unallocated_pct": {seed: x}, "stock_mean", "devshare_mean", "sim_mean", "pods_per_s_stock",
"pods_per_s_devshare", "overconsumed_devices"}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from devshare.engine.policies import make_policy
from devshare.kube.dra import path_of
from devshare.kube.errors import BackendError
from devshare.kube.rest import EVENTS, PODS, KubeClient, api_path
from devshare.model import dra, draslices
from devshare.model.quantity import parse_quantity
from devshare.sim import solver
from devshare.sim.online import replay_online
from devshare.sim.replay import MAX_ARRIVED, arrival_order, replay
from devshare.sim.runner import DEFAULT_NODES, DEFAULT_PODS, bundled
from devshare.sim.trace import Trace, TracePod, load_trace
from e2e.cluster import SCHEDULER_NAME, ControlPlane, control_plane, wait_until

STOCK_CLASS = "gpu.bench.example.com"  # selects devshare's published GPUs, but is not devshare's: no gate
STOCK_SCHEDULER = "stock-scheduler"  # a kube-scheduler of its own, default profile, no extender
PHASE_LABEL = "bench.devshare.io/phase"
WAIT = 90.0  # seconds a pod may take to be placed or refused before it counts as not placed


def sample(trace: Trace, n: int, seed: int) -> Trace:
    """``n`` GPU nodes of the trace, drawn once with ``seed`` (every run uses the same sample)."""
    rng = np.random.default_rng(seed)
    idx = sorted(rng.choice(len(trace.nodes), size=n, replace=False).tolist())
    return Trace(name=f"{trace.name}-sample{n}", nodes=tuple(trace.nodes[i] for i in idx), pods=trace.pods)


def node_objects(trace: Trace, phase: str) -> list[dict[str, Any]]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out: list[dict[str, Any]] = []
    for n in trace.nodes:
        name = f"{phase}-{n.name}"
        res = {"cpu": f"{n.cpu_milli}m", "memory": f"{n.memory_mib}Mi", "pods": "1000"}
        out.append({"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": {PHASE_LABEL: phase, "kubernetes.io/hostname": name,
                                                          "devshare.io/gpu-model": n.model}},
                    "status": {"capacity": res, "allocatable": res,
                               "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                               "message": "bench", "lastHeartbeatTime": now,
                                               "lastTransitionTime": now}]}})
        devices = [{"type": "gpu", "minor": i, "id": f"GPU-{name}-{i}", "health": True, "model": n.model,
                    "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "16Gi",
                                  "koordinator.sh/gpu-memory-ratio": "100"}} for i in range(n.gpus)]
        out.append({"apiVersion": "devshare.io/v1alpha1", "kind": "Device",
                    "metadata": {"name": name, "labels": {PHASE_LABEL: phase, "devshare.io/gpu-model": n.model}},
                    "spec": {"devices": devices}})
    return out


def claim_for(tp: TracePod, name: str, ns: str, device_class: str) -> dict[str, Any]:
    ex: dict[str, Any] = {"deviceClassName": device_class, "count": tp.num_gpu,
                          "capacity": {"requests": {"compute": str(min(tp.gpu_milli, 1000) // 10)}}}
    if tp.gpu_spec:
        models = ", ".join(json.dumps(m) for m in tp.gpu_spec)
        ex["selectors"] = [{"cel": {"expression": f'device.attributes["{dra.DRIVER}"].model in [{models}]'}}]
    return {"apiVersion": dra.API_VERSION, "kind": "ResourceClaim", "metadata": {"name": name, "namespace": ns},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": ex}]}}}


def pod_for(tp: TracePod, name: str, ns: str, phase: str, claim: str | None, scheduler: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"requests": {"cpu": f"{tp.cpu_milli}m",
                                                            "memory": f"{tp.memory_mib}Mi"}}}
    spec: dict[str, Any] = {"schedulerName": scheduler, "nodeSelector": {PHASE_LABEL: phase},
                            "terminationGracePeriodSeconds": 0, "containers": [container]}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]
        container["resources"]["claims"] = [{"name": "gpu"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}


class Outcomes:
    """Futures of the pods in flight, settled by the watches of the phase's pods and events."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Future[str]] = {}

    def expect(self, name: str) -> asyncio.Future[str]:
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.waiting[name] = fut
        return fut

    def settle(self, name: str, outcome: str) -> None:
        fut = self.waiting.get(name)
        if fut is not None and not fut.done():
            fut.set_result(outcome)

    async def watch_pods(self, api: KubeClient, ns: str) -> None:
        rv = ""
        while True:
            try:
                async for ev in api.watch_path(api_path(PODS, namespace=ns), rv):
                    obj = ev.object
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    name = obj["metadata"]["name"]
                    if (obj.get("spec") or {}).get("nodeName"):
                        self.settle(name, "bound")
                        continue
                    for c in (obj.get("status") or {}).get("conditions") or []:
                        if (c.get("type") == "PodScheduled" and c.get("status") == "False"
                                and c.get("reason") == "Unschedulable"):
                            self.settle(name, "unschedulable")
            except BackendError:
                await asyncio.sleep(0.5)

    async def watch_events(self, api: KubeClient, ns: str) -> None:
        rv = ""
        while True:
            try:
                async for ev in api.watch_path(api_path(EVENTS, namespace=ns), rv):
                    obj = ev.object
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if obj.get("reason") == "FailedDRAAllocation":
                        self.settle(obj["involvedObject"]["name"], "refused")
            except BackendError:
                await asyncio.sleep(0.5)


async def run_phase(cp: ControlPlane, trace: Trace, seed: int, mode: str, stop_at: int) -> dict[str, Any]:
    phase = f"{mode[:2]}{seed}"
    ns = cp.namespace(f"bench-{mode}-{seed}")
    create(cp, node_objects(trace, phase))
    names = {f"{phase}-{n.name}" for n in trace.nodes}
    wait_until(lambda: names <= {s["spec"].get("nodeName") for s in cp.get("resourceslices")["items"]},
               timeout=300, interval=1.0, what=f"ResourceSlices of phase {phase}")
    api = KubeClient.connect(cp.admin)
    outcomes = Outcomes()
    watchers = [asyncio.create_task(outcomes.watch_pods(api, ns)), asyncio.create_task(outcomes.watch_events(api, ns))]
    await asyncio.sleep(0.5)  # the watches open
    cls = STOCK_CLASS if mode == "stock" else dra.CLASS_GPU
    cap = trace.gpu_capacity
    arrived = allocated = placed = processed = timeouts = 0
    started = time.monotonic()
    for k, (_, tp) in enumerate(arrival_order(trace, seed)):
        if arrived * 100 // cap >= stop_at:
            break
        pname = f"p{k:05d}"
        claim = None
        fut = outcomes.expect(pname)
        if tp.num_gpu:
            claim = f"{pname}-gpu"
            await api.create(path_of("resourceclaims", ns), claim_for(tp, claim, ns, cls))
        await api.create(api_path(PODS, namespace=ns),
                         pod_for(tp, pname, ns, phase, claim, STOCK_SCHEDULER if mode == "stock" else SCHEDULER_NAME))
        try:
            outcome = await asyncio.wait_for(fut, WAIT)
        except TimeoutError:
            outcome = "timeout"
            timeouts += 1
        processed += 1
        arrived += tp.gpu_total
        if outcome == "bound":
            placed += 1
            allocated += tp.gpu_total
        else:
            await _delete(api, ns, pname, claim)
        outcomes.waiting.pop(pname, None)
    seconds = time.monotonic() - started
    over = overconsumed(cp, ns)
    for w in watchers:
        w.cancel()
    await api.close()
    # the phase's nodes go: the next phase starts on an empty sample
    for kind in ("nodes", "devices"):
        cp.kubectl("delete", kind, "-l", f"{PHASE_LABEL}={phase}", "--wait=false", timeout=600)
    out = {"mode": mode, "seed": seed, "arrived_pct": arrived * 100.0 / cap,
           "allocated_pct": allocated * 100.0 / cap, "unallocated_pct": 100.0 - allocated * 100.0 / cap,
           "pods": processed, "placed": placed, "timeouts": timeouts, "seconds": round(seconds, 1),
           "pods_per_s": processed / seconds if seconds else 0.0, "overconsumed_devices": over}
    print(json.dumps(out), file=sys.stderr, flush=True)
    return out


async def _delete(api: KubeClient, ns: str, pod: str, claim: str | None) -> None:
    for path in [api_path(PODS, namespace=ns, name=pod)] + ([path_of("resourceclaims", ns, claim)] if claim else []):
        with contextlib.suppress(BackendError):
            await api.delete(path)


def overconsumed(cp: ControlPlane, ns: str) -> int:
    """Devices whose claims (in ``ns``) consume more compute than a device has (100 percent)."""
    used: dict[tuple[str, str], float] = defaultdict(float)
    for c in cp.get("resourceclaims", "-n", ns)["items"]:
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []):
            cons = (r.get("consumedCapacity") or {}).get("compute", "100")
            used[(r["pool"], r["device"])] += float(parse_quantity(cons))
    return sum(1 for v in used.values() if v > 100 + 1e-9)


def stock_config(cp: ControlPlane) -> Path:
    """kube-scheduler's default profile under its own name, with no extender: stock scheduling."""
    import yaml

    path = cp.root / "stock-scheduler.yaml"
    path.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": str(cp.token_kubeconfig("devshare-scheduler")), "qps": 500, "burst": 1000},
        "profiles": [{"schedulerName": STOCK_SCHEDULER}]}))
    return path


def create(cp: ControlPlane, objects: list[dict[str, Any]]) -> None:
    for i in range(0, len(objects), 200):
        cp.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                         "items": objects[i:i + 200]}), timeout=600)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=100, help="openb GPU nodes in the sample (at least 100)")
    ap.add_argument("--seeds", default="42,43,44")
    ap.add_argument("--sample-seed", type=int, default=0, help="which nodes are sampled")
    ap.add_argument("--stop-at", type=int, default=100, help="arrived %% at which a phase stops (100: the metric)")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    solver.install()  # HiGHS prints no banner into the report
    full = load_trace(bundled(DEFAULT_NODES), bundled(DEFAULT_PODS))
    trace = sample(full, args.nodes, args.sample_seed)
    print(f"sample: {len(trace.nodes)} nodes, {trace.gpu_capacity // 1000} GPUs; load {os.getloadavg()}",
          file=sys.stderr, flush=True)
    # devshare simulate as this bench runs devshare (devshare places every pod); and, for reference, the
    # replay with CPU-only pods left to stock kube-scheduler (devshare.sim.online) and the dra-baseline
    # policy
    sim = {s: replay(trace, make_policy("devshare", seed=s), s).unallocated_at_100 for s in seeds}
    online = {s: replay_online(trace, make_policy("devshare", seed=s), s).unallocated_at_100 for s in seeds}
    base = {s: replay(trace, make_policy("dra-baseline", seed=s), s).unallocated_at_100 for s in seeds}
    print(f"simulator: devshare placing every pod {sim}; CPU-only pods left to kube-scheduler {online}; "
          f"dra-baseline {base}", file=sys.stderr, flush=True)
    results: list[dict[str, Any]] = []
    root = Path(tempfile.mkdtemp(prefix="devshare-bench-dra-"))
    with control_plane(root) as cp:
        cp.install()
        stock_class = draslices.device_class_object(STOCK_CLASS, "gpu")
        stock_class["metadata"] = {"name": STOCK_CLASS}  # the same devices, without devshare's label: no gate
        cp.apply(stock_class)
        cp.start_extender()
        cp.start_scheduler()
        cp.start_scheduler(config=stock_config(cp), name="kube-scheduler-stock")
        cp.start_webhook()
        for s in seeds:
            for mode in ("stock", "devshare"):
                if mode == "devshare":
                    # a fresh extender for each seed, as each simulated seed starts afresh: its learning
                    # policy would otherwise carry the task mix of the earlier phases
                    cp.processes["extender"].stop()
                    cp.start_extender()
                results.append(asyncio.run(run_phase(cp, trace, s, mode, args.stop_at)))
    assert args.stop_at <= MAX_ARRIVED
    stock = {str(r["seed"]): round(r["unallocated_pct"], 2) for r in results if r["mode"] == "stock"}
    mine = {str(r["seed"]): round(r["unallocated_pct"], 2) for r in results if r["mode"] == "devshare"}
    rate = {m: sum(r["pods"] for r in results if r["mode"] == m) / sum(r["seconds"] for r in results
                                                                        if r["mode"] == m)
            for m in ("stock", "devshare")}
    print(json.dumps({
        "nodes": len(trace.nodes), "seeds": seeds,
        "stock_unallocated_pct": stock, "devshare_unallocated_pct": mine,
        "sim_unallocated_pct": {str(s): round(v, 2) for s, v in sim.items()},
        "stock_mean": round(statistics.fmean(stock.values()), 2),
        "devshare_mean": round(statistics.fmean(mine.values()), 2),
        "sim_mean": round(statistics.fmean(sim.values()), 2),
        "pods_per_s_stock": round(rate["stock"], 2), "pods_per_s_devshare": round(rate["devshare"], 2),
        "overconsumed_devices": sum(r["overconsumed_devices"] for r in results),
    }))


if __name__ == "__main__":
    main()
