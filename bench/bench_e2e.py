"""Scheduling throughput on the real control plane: kube-scheduler alone against kube-scheduler with
the devshare extender, in one run, on the same API server.

N fake nodes of 8 GPUs (Node objects with allocatable ``bench.devshare.io/gpu: 8`` for the plain run,
and a Device object each for devshare). P pods are created while no scheduler runs, then
kube-scheduler is started and the pods are timed from the first bound to the last bound, through a
watch:

- alone: pods asking ``bench.devshare.io/gpu: 1`` (a plain extended resource kube-scheduler counts
  itself; the extender is not interested in them), scheduled by a kube-scheduler with no extender;
- devshare: the same pods asking ``nvidia.com/gpu: 1``, scheduled by deploy/scheduler's
  configuration (filter, prioritize and bind through the extender, which runs with its
  ServiceAccount's identity).

Where the time goes, per phase (on stderr, and under ``"phases"`` in the JSON):
CPU milliseconds per pod bound of each process (etcd, kube-apiserver, kube-scheduler, the extender;
user + system from /proc/PID/stat, from just before kube-scheduler starts until the last pod is
bound) and API requests per pod (the API server's ``apiserver_request_total`` before and after, by
verb and resource; the benchmark's own watch is one of them), and the machine's CPU over the phase
(/proc/stat: busy ms per pod of every process, the bench's own included, and the shares of CPU time
left idle and taken by the hypervisor's steal). ``--profile FILE`` records the extender with py-spy
during each devshare phase (a speedscope JSON, one file per phase) when ``py-spy`` is installed (``pip
install py-spy``; not a dependency of devshare).

``--rounds R`` (default 4) runs R rounds of one phase of each kind on one control plane, in
alternating order: with 4, alone, devshare, devshare, alone, alone, devshare, devshare, alone. The
machine's speed drifts through a run, and in the order A B B A a steady drift weighs on both kinds
alike; a single alone phase followed by a single devshare phase (``--rounds 1``) puts all of it on one
side. On the development machine a ratio from 4 rounds is known to about 4.5% (BENCHMARKS.md,
"Real control plane"). Each phase starts from the same cluster (the pods of the one before deleted),
and each kind's rate pools its phases: all their pods over all their time.

The last line printed is one JSON object:
``{"nodes", "pods", "rounds", "pods_per_s_alone", "pods_per_s_devshare", "ratio", "binds_refused", "phases"}``
(and ``"pods_per_s_shared", "ratio_shared"`` with ``--shared``)
(``binds_refused``: binds the extender answered with an error in all its phases, from its metrics;
``phases``: each phase in order, ``{"phase", "pods_per_s", "cpu_ms_per_pod": {process: ms},
"requests_per_pod": n, "requests": {"VERB resource": n}, "machine": {"busy_ms_per_pod", "idle_pct",
"steal_pct"}, "scheduler_ms": {...}}``, with ``binds_refused`` in the extender's, and ``loop_stalls`` in
devshare's: the times its event loop ran nothing for a second or more while the pods were scheduled).

``--window P`` gives both kube-schedulers (alone and devshare's) the same ``percentageOfNodesToScore: P``
(the window of candidate nodes each pod is filtered over; default: kube-scheduler's adaptive one, as
deploy/ ships it), so that the two are compared at the same window (docs/deploy.md, "Large clusters").

``--extender floor`` (or ``floor-no-bind``, ``floor-annotate``, ``floor-webhook``) runs
bench/floor_extender.py in devshare's place: an extender that passes kube-scheduler's first candidate
and posts the Binding, nothing else (or only filters, kube-scheduler binding itself; or writes the
annotation onto the pod in filter and lets kube-scheduler bind; or lets kube-scheduler bind and adds
the annotation to its Binding from a mutating admission webhook): the floor of what any extender costs
on these cores.

``--phases alone,floor,devshare,devshare-no-ledger,...`` runs several phases on one control plane
instead, in that order (``--pods`` new pods each, the extender restarted for each, the pods of one
phase deleted before the next), each reporting pods/s, CPU per pod of each process and the API
requests per pod, as above: the machine's speed drifts between runs, so parts are compared within
one run.
``devshare`` runs the extender as deploy/scheduler does: beside a kube-scheduler whose hostname is the
pod's name, binding exactly while that kube-scheduler holds its Lease (``--follow-lease``);
``devshare-elect`` runs it with a Lease of its own instead (``--leader-elect``, the mode without a
kube-scheduler in the same pod).
``devshare-asyncio`` is devshare on the standard library's event loop instead of uvloop (``--event-loop
asyncio``), ``devshare-no-lane`` devshare with every request through aiohttp (``--no-lane``),
``devshare-no-steer`` devshare without the steering taint (``scheduling.steerOtherPods`` off),
``devshare-shared`` devshare with pods that share cards: 30% of a card's compute and 6 GiB of its
memory each (``--shared`` adds such a phase to every round, its rate reported against the same alone
phases as ``ratio_shared``).

``DEVSHARE_E2E_PROFILING=1`` starts the API server with ``--profiling`` (``kubectl get --raw
/debug/pprof/profile?seconds=15`` during a phase). ``--ledger-phases on,off,on,off`` is
``--phases devshare,devshare-no-ledger,devshare,devshare-no-ledger``.

    .venv/bin/python bench/bench_e2e.py --nodes 1000 --pods 3000
    .venv/bin/python bench/bench_e2e.py --nodes 5000 --pods 3000 --shared
    .venv/bin/python bench/bench_e2e.py --nodes 5000 --pods 3000 --window 1
    .venv/bin/python bench/bench_e2e.py --nodes 1000 --pods 1000 --ledger-phases on,off,on,off
    .venv/bin/python bench/bench_e2e.py --nodes 5000 --pods 3000 --phases alone,floor,devshare,alone,floor,devshare
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from e2e.cluster import SCHEDULER_NAME, ControlPlane, control_plane

PLAIN = "bench.devshare.io/gpu"
NS = "bench"
# the shared workload (--shared): 30% of a card's compute and 6 GiB of its memory (Koordinator's names)
SHARED = {"koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory": "6Gi"}


def api(cp: ControlPlane) -> Any:
    from lightkube import Client
    from lightkube.config.kubeconfig import KubeConfig

    return Client(KubeConfig.from_file(str(cp.admin)), field_manager="bench")


def create(cp: ControlPlane, objects: list[dict[str, Any]], *, parallel: int = 4, chunk: int = 250) -> None:
    """Create ``objects`` with ``kubectl create`` processes, ``chunk`` objects each, ``parallel`` at once
    (one process per thread: lightkube's msgspec decoding is not safe across threads)."""
    chunks = [objects[i:i + chunk] for i in range(0, len(objects), chunk)]

    def one(items: list[dict[str, Any]]) -> None:
        cp.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
                   timeout=900)

    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(one, chunks))


def make_nodes(cp: ControlPlane, n: int) -> None:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    objects: list[dict[str, Any]] = []
    for i in range(n):
        name = f"bench-{i:05d}"
        res = {"cpu": "128", "memory": "1Ti", "pods": "110", PLAIN: "8"}
        objects.append({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                        "status": {"capacity": res, "allocatable": res, "conditions": [
                            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench",
                             "lastHeartbeatTime": now, "lastTransitionTime": now}]}})
        objects.append({
            "apiVersion": "devshare.io/v1alpha1", "kind": "Device", "metadata": {"name": name},
            "spec": {"devices": [{"type": "gpu", "minor": m, "id": f"GPU-{name}-{m}", "health": True,
                                  "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "80Gi",
                                                "koordinator.sh/gpu-memory-ratio": "100"}}
                                 for m in range(8)]}})
    create(cp, objects)


def make_pods(cp: ControlPlane, prefix: str, resources: dict[str, str], count: int, scheduler: str) -> None:
    create(cp, [{"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"{prefix}-{i:05d}", "namespace": NS, "labels": {"bench-phase": prefix}},
                 "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                          "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                          "resources": {"limits": dict(resources)}}]}}
                for i in range(count)])


class BoundClock:
    """Watches the namespace's pods and notes when each was first seen bound."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.bound: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from lightkube.resources.core_v1 import Pod

        client = api(self.cp)
        while not self.stop.is_set():
            try:
                for _, pod in client.watch(Pod, namespace=NS):
                    if pod.spec.nodeName and pod.metadata.name not in self.bound:
                        self.bound[pod.metadata.name] = time.monotonic()
                    if self.stop.is_set():
                        return
            except Exception:
                time.sleep(0.2)

    def rate(self, prefix: str, count: int, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            times = [t for name, t in list(self.bound.items()) if name.startswith(prefix + "-")]
            if len(times) >= count:
                return (count - 1) / max(max(times) - min(times), 1e-9)
            time.sleep(0.2)
        done = sum(1 for name in list(self.bound) if name.startswith(prefix + "-"))
        raise TimeoutError(f"{prefix}: only {done} of {count} pods bound in {timeout:.0f}s")


Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def samples_of(text: str) -> Samples:
    """A Prometheus exposition's samples: name -> (sorted labels) -> value. Parsed with
    prometheus_client's own parser: the exposition sorts each sample's labels by name, whatever order
    they were declared in."""
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def extender_metrics(port: int) -> Samples:
    """The extender's samples (:func:`samples_of`)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return samples_of(r.read().decode())


def loop_stalls(samples: Samples) -> int:
    """Times the extender's event loop ran nothing for a second or more, since it started (from its
    samples, :func:`extender_metrics`)."""
    return int(sum(samples.get("devshare_extender_loop_stalls_total", {}).values()))


def refused_binds(port: int) -> int:
    """Binds the extender answered with an error."""
    samples = extender_metrics(port).get("devshare_extender_requests_total", {})
    return int(sum(v for labels, v in samples.items() if dict(labels) == {"verb": "bind", "result": "error"}))


def latencies(port: int) -> dict[str, float]:
    """Mean milliseconds per extender request, by verb (from its Prometheus histogram)."""
    m = extender_metrics(port)
    sums = {dict(k)["verb"]: v for k, v in m.get("devshare_extender_request_seconds_sum", {}).items()}
    counts = {dict(k)["verb"]: v for k, v in m.get("devshare_extender_request_seconds_count", {}).items()}
    return {v: round(1000 * sums[v] / counts[v], 2) for v in sums if counts.get(v)}


def lane_counts(port: int) -> dict[str, int]:
    """The extender's lane: verb requests it answered itself, connections it handed to aiohttp."""
    m = extender_metrics(port)
    return {k: int(sum(m.get(f"devshare_extender_lane_{k}_total", {}).values()))
            for k in ("requests", "handovers", "connections")}


def scheduler_latencies(cp: ControlPlane, sched: Any) -> dict[str, float]:
    """Mean milliseconds per pod of kube-scheduler's scheduling algorithm (its filters, the extender's
    filter and the scoring: one pod at a time, so it bounds the pods per second) and of a whole
    scheduling attempt, from its own metrics (read with the admin's client certificate)."""
    port = next(a.split("=", 1)[1] for a in sched.args if a.startswith("--secure-port="))
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # its serving certificate is self-signed in its cert dir
    context.load_cert_chain(cp.pki / "admin.crt", cp.pki / "admin.key")
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=10, context=context) as r:
            text = r.read().decode()
    except OSError as e:
        print(f"kube-scheduler's metrics: {e}", file=sys.stderr)
        return {}
    m = samples_of(text)
    out: dict[str, float] = {}
    for key in ("scheduling_algorithm", "scheduling_attempt"):
        name = f"scheduler_{key}_duration_seconds"  # summed over its labels (the attempt's result, profile)
        total, count = (sum(m.get(name + part, {}).values()) for part in ("_sum", "_count"))
        if count:
            out[key] = round(1000 * total / count, 2)
    return out


def failures(port: int) -> dict[str, int]:
    """Nodes refused by filter and binds refused so far, by ``verb/reason`` class (the extender's metrics)."""
    samples = extender_metrics(port).get("devshare_extender_failures_total", {})
    return {f"{dict(k)['verb']}/{dict(k)['reason']}": int(v) for k, v in samples.items()}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


PROCESSES = ("etcd", "kube-apiserver", "kube-scheduler", "extender")


def machine_ticks() -> dict[str, int]:
    """The machine's CPU time so far, in clock ticks summed over its CPUs (Linux /proc/stat): busy
    (user, nice, system, irq, softirq), idle (idle, iowait) and steal (time the hypervisor ran
    something else while this machine's CPUs wanted to run)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = fields
    return {"busy": user + nice + system + irq + softirq, "idle": idle + iowait, "steal": steal}


def machine_share(t0: dict[str, int], t1: dict[str, int], pods: int) -> dict[str, float]:
    """Between two :func:`machine_ticks`: the machine's busy CPU ms per pod (every process, the
    bench's own included), and the shares of its CPU time left idle and taken by steal, in percent."""
    d = {k: t1[k] - t0[k] for k in t0}
    total = max(sum(d.values()), 1)
    return {"busy_ms_per_pod": round(1000 * d["busy"] / os.sysconf("SC_CLK_TCK") / max(pods, 1), 2),
            "idle_pct": round(100 * d["idle"] / total, 1), "steal_pct": round(100 * d["steal"] / total, 1)}


class Phase:
    """CPU seconds of each control-plane process and the API server's request counters, from
    :meth:`start` to :meth:`stop`, per pod bound."""

    def __init__(self, cp: ControlPlane, scheduler: str) -> None:
        self.cp = cp
        self.names = {"etcd": "etcd", "kube-apiserver": "kube-apiserver", "kube-scheduler": scheduler,
                      "extender": "extender"}
        self.cpu0: dict[str, float] = {}
        self.requests0: dict[str, float] = {}
        self.ticks0: dict[str, int] = {}

    def _pids(self) -> dict[str, int]:
        out = {}
        for label, name in self.names.items():
            proc = self.cp.processes.get(name)
            if proc is not None and proc.alive and proc.popen is not None:
                out[label] = proc.popen.pid
        return out

    def _cpu(self) -> dict[str, float]:
        return {label: cpu_seconds(pid) for label, pid in self._pids().items()}

    def start(self) -> None:
        """Before kube-scheduler starts: the processes already running (kube-scheduler then counts from 0)."""
        self.cpu0 = self._cpu()
        self.requests0 = api_requests(self.cp)
        self.ticks0 = machine_ticks()

    def stop(self, pods: int) -> dict[str, Any]:
        ticks = machine_ticks()
        cpu = self._cpu()
        requests = api_requests(self.cp)
        delta = {k: v - self.requests0.get(k, 0.0) for k, v in requests.items()}
        delta = {k: v for k, v in sorted(delta.items(), key=lambda kv: -kv[1]) if v >= 1}
        return {
            "cpu_ms_per_pod": {label: round(1000 * (cpu[label] - self.cpu0.get(label, 0.0)) / pods, 2)
                               for label in PROCESSES if label in cpu},
            "requests_per_pod": round(sum(delta.values()) / pods, 2),
            "requests": {k: int(v) for k, v in list(delta.items())[:12]},
            "machine": machine_share(self.ticks0, ticks, pods),
        }


REQUEST_LINE = re.compile(r"^apiserver_request_total\{([^}]*)\} ([0-9.e+]+)$")
LABEL = re.compile(r'(\w+)="([^"]*)"')


def api_requests(cp: ControlPlane) -> dict[str, float]:
    """The API server's requests so far, by ``VERB resource[/subresource]`` (its /metrics)."""
    text = cp.kubectl("get", "--raw", "/metrics", timeout=60).stdout
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = REQUEST_LINE.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(1)))
        what = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
        key = f"{labels.get('verb', '?')} {what or labels.get('component', '?')}"
        out[key] = out.get(key, 0.0) + float(m.group(2))
    return out


def py_spy() -> str | None:
    """The py-spy executable (beside this Python, or on PATH), or None."""
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


def start_profile(pid: int, out: Path) -> subprocess.Popen[bytes] | None:
    exe = py_spy()
    if exe is None:
        print("--profile: py-spy is not installed (pip install py-spy); no profile written", file=sys.stderr)
        return None
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--output", str(out), "--format", "speedscope",
                             "--rate", "250", "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def stop_profile(proc: subprocess.Popen[bytes] | None, out: Path) -> None:
    if proc is None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    if out.exists():
        print(f"extender profile: {out}", file=sys.stderr)
    else:
        print(f"py-spy wrote no profile: {err.decode(errors='replace')[-500:]}", file=sys.stderr)


def report(name: str, rate: float, phase: dict[str, Any]) -> None:
    cpu = ", ".join(f"{k} {v}" for k, v in phase["cpu_ms_per_pod"].items())
    print(f"{name}: {rate:.1f} pods/s; CPU ms per pod: {cpu}; API requests per pod: {phase['requests_per_pod']} "
          f"({', '.join(f'{k} {v}' for k, v in list(phase['requests'].items())[:6])}); "
          f"kube-scheduler ms per pod: {phase.get('scheduler_ms')}; machine: {phase.get('machine')}", file=sys.stderr)


EXTENDERS = ("devshare", "devshare-shared", "devshare-elect", "devshare-no-ledger", "devshare-asyncio",
             "devshare-no-lane", "devshare-no-steer", "floor", "floor-no-bind", "floor-annotate", "floor-h2",
             "floor-webhook")
# the scheduler pod's name, as deploy/scheduler runs it: kube-scheduler's hostname (its Lease identity
# starts with it) and the extender's --pod-name, which then binds exactly while its kube-scheduler leads
POD = "devshare-scheduler-bench"
PHASES = ("alone", *EXTENDERS)


def run_phase(cp: ControlPlane, clock: BoundClock, kind: str, prefix: str, args: argparse.Namespace, *,
              profile: Path | None = None) -> dict[str, Any]:
    """One phase: ``args.pods`` new pods scheduled by kube-scheduler alone (``alone``) or with the
    extender ``kind`` (restarted for the phase); pods/s, CPU and API requests per pod as
    :class:`Phase` counts them. The phase's pods stay; :func:`clear` removes them."""
    if kind == "alone":
        ext = cp.processes.get("extender")
        if ext is not None and ext.alive:
            ext.stop()  # an earlier phase's extender would watch these pods too
        make_pods(cp, prefix, {PLAIN: "1"}, args.pods, SCHEDULER_NAME)
        print(f"{kind}: scheduling", file=sys.stderr, flush=True)
        phase = Phase(cp, "kube-scheduler-alone")
        phase.start()
        sched = cp.start_scheduler(config=plain_config(cp, args.window), name="kube-scheduler-alone")
        rate = clock.rate(prefix, args.pods, args.timeout)
        out = {"phase": kind, "pods_per_s": round(rate, 1), **phase.stop(args.pods)}
        out["scheduler_ms"] = scheduler_latencies(cp, sched)
        sched.stop()
        report(kind, rate, out)
        return out
    previous = cp.processes.get("extender")
    start_extender(cp, kind)
    if previous is not None and previous.stopped:  # on SIGTERM, or killed: then its Lease was left to expire
        print(f"the last phase's extender {previous.stopped}", file=sys.stderr)
    make_pods(cp, prefix, SHARED if kind == "devshare-shared" else {"nvidia.com/gpu": "1"}, args.pods, SCHEDULER_NAME)
    print(f"{kind}: scheduling", file=sys.stderr, flush=True)
    ext = cp.processes["extender"].popen
    assert ext is not None
    time.sleep(2)  # the extender's watch takes in the pods just made (not the scheduling's cost)
    stalls_before, leads = 0, None
    if kind.startswith("devshare"):
        before = extender_metrics(cp.extender_port)
        stalls_before = loop_stalls(before)
        leads = bool(sum(before.get("devshare_extender_leader", {}).values()))
        # kube-scheduler binds as soon as it holds its Lease: an extender on a Lease of its own that does
        # not lead yet (its predecessor killed, its Lease not released) refuses those binds
        print(f"the extender leads as kube-scheduler starts: {leads}"
              + (" (it follows kube-scheduler's Lease, which kube-scheduler takes once started)"
                 if follows_lease(kind) else ""), file=sys.stderr)
    phase = Phase(cp, "kube-scheduler")
    phase.start()
    profiler = start_profile(ext.pid, profile) if profile is not None else None
    sched = cp.start_scheduler(config=devshare_config(cp, args.window, bind=kind not in ("floor-no-bind",
                                                                                          "floor-annotate",
                                                                                          "floor-webhook"),
                                                      h2=kind == "floor-h2"),
                               hostname=POD if follows_lease(kind) else None)
    rate = clock.rate(prefix, args.pods, args.timeout)
    out = {"phase": kind, "pods_per_s": round(rate, 1), **phase.stop(args.pods)}
    if profile is not None:
        stop_profile(profiler, profile)
    out["scheduler_ms"] = scheduler_latencies(cp, sched)
    report(kind, rate, out)
    out["binds_refused"] = refused_binds(cp.extender_port) if kind != "floor-h2" else 0
    if kind.startswith("devshare"):
        print(f"extender ms per request: {latencies(cp.extender_port)}", file=sys.stderr)
        print(f"extender failures: {failures(cp.extender_port)}", file=sys.stderr)
        print(f"extender lane: {lane_counts(cp.extender_port)}", file=sys.stderr)
        out["loop_stalls"] = loop_stalls(extender_metrics(cp.extender_port)) - stalls_before
        out["leads_at_start"] = leads
        print(f"extender event loop stalls of 1 s or more while the pods were scheduled: {out['loop_stalls']}",
              file=sys.stderr)
        if out["binds_refused"] or out["loop_stalls"]:  # its warnings say why (its log goes with the control plane)
            print(f"extender log, last lines:\n{cp.processes['extender'].tail(80)}", file=sys.stderr)
    elif kind != "floor-h2":
        with urllib.request.urlopen(f"http://127.0.0.1:{cp.extender_port}/metrics", timeout=10) as r:
            print(r.read().decode().strip(), file=sys.stderr)
    sched.stop()
    if kind == "floor-webhook":
        out["annotated"] = annotated(cp, prefix)
        print(f"pods bound with the webhook's annotation: {out['annotated']} of {args.pods}", file=sys.stderr)
        cp.kubectl("delete", "mutatingwebhookconfiguration", FLOOR_WEBHOOK)
    return out


FLOOR_WEBHOOK = "floor-binding.bench.devshare.io"


def register_floor_webhook(cp: ControlPlane, port: int) -> None:
    """The floor's ``/mutate-binding`` as a mutating webhook on every Binding (``floor-webhook``)."""
    ca = base64.b64encode((cp.pki / "ca.crt").read_bytes()).decode()
    cp.apply([{"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
               "metadata": {"name": FLOOR_WEBHOOK},
               "webhooks": [{"name": FLOOR_WEBHOOK, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                             "failurePolicy": "Fail", "timeoutSeconds": 10,
                             "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate-binding", "caBundle": ca},
                             "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                        "resources": ["pods/binding"]}]}]}])


def annotated(cp: ControlPlane, prefix: str) -> int:
    """The phase's pods that carry the floor's allocation annotation."""
    pods = json.loads(cp.kubectl("get", "pods", "-n", NS, "-l", f"bench-phase={prefix}", "-o", "json").stdout)
    return sum(1 for p in pods["items"] if "devshare.io/allocation" in (p["metadata"].get("annotations") or {}))


def clear(cp: ControlPlane, prefix: str) -> None:
    """Delete a phase's pods and wait until they are gone (the next phase starts from the same cluster)."""
    cp.kubectl("delete", "--raw", f"/api/v1/namespaces/{NS}/pods?labelSelector=bench-phase%3D{prefix}"
               "&gracePeriodSeconds=0", timeout=300)  # one deletecollection
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        left = [n for n in cp.kubectl("get", "pods", "-n", NS, "-o", "name").stdout.split()
                if n.startswith(f"pod/{prefix}-")]
        if not left:
            return
        time.sleep(1)
    raise TimeoutError(f"{len(left)} pods of phase {prefix} still there after 300 s")


def plain_config(cp: ControlPlane, window: int | None = None) -> Path:
    path = cp.root / "alone-config.yaml"
    import yaml

    path.write_text(yaml.safe_dump({
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
        "clientConnection": {"kubeconfig": str(cp.token_kubeconfig("devshare-scheduler")), "qps": 500, "burst": 1000},
        "profiles": [{"schedulerName": SCHEDULER_NAME, **windowed(window)}],
    }))
    return path


def windowed(window: int | None) -> dict[str, int]:
    """The profile field of ``--window`` (nothing: kube-scheduler's adaptive window)."""
    return {} if window is None else {"percentageOfNodesToScore": window}


def devshare_config(cp: ControlPlane, window: int | None, *, bind: bool = True, h2: bool = False) -> Path:
    """deploy/'s kube-scheduler configuration (cp.scheduler_config), with ``--window`` applied
    (``bind=False``: kube-scheduler binds, the extender only filters; ``h2``: the extender over TLS,
    which kube-scheduler's client then speaks HTTP/2 over)."""
    import yaml

    path = cp.scheduler_config(cp.extender_port)
    cfg = yaml.safe_load(path.read_text())
    cfg["profiles"][0].update(windowed(window))
    for ext in cfg["extenders"]:
        if not bind:
            ext.pop("bindVerb", None)
        if h2:
            ext["urlPrefix"] = ext["urlPrefix"].replace("http://", "https://")
            ext["enableHTTPS"] = True
            ext["tlsConfig"] = {"insecure": True}
    path.write_text(yaml.safe_dump(cfg))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=3000)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--profile", type=Path, default=None,
                    help="record the extender with py-spy during each of its phases (speedscope; one file per "
                         "phase: FILE's name and the phase's)")
    ap.add_argument("--phases", default="",
                    help=f"phases on one control plane, e.g. alone,floor,devshare,alone (of: {', '.join(PHASES)})")
    ap.add_argument("--rounds", type=int, default=4,
                    help="rounds of one alone phase and one with the extender, in alternating order (4: alone, "
                         "extender, extender, alone, alone, extender, extender, alone); the rates pool each "
                         "kind's phases")
    ap.add_argument("--ledger-phases", default="", help="e.g. on,off,on,off: --phases devshare,devshare-no-ledger,...")
    ap.add_argument("--window", type=int, default=None,
                    help="percentageOfNodesToScore of both kube-schedulers (default: kube-scheduler's adaptive window)")
    ap.add_argument("--shared", action="store_true",
                    help="each round also schedules a phase of shared pods (30%% compute + 6 GiB of a card) through "
                         "the extender; its rate is reported against the same alone phases (ratio_shared)")
    ap.add_argument("--extender", choices=EXTENDERS, default="devshare",
                    help="floor: bench/floor_extender.py in devshare's place (the extender protocol's own cost)")
    args = ap.parse_args()
    if args.window is not None and not 0 < args.window <= 100:
        raise SystemExit("--window: a percentage from 1 to 100 (leave it out for kube-scheduler's adaptive window)")
    if args.rounds < 1:
        raise SystemExit("--rounds: at least 1 (1: one alone phase, then one with the extender)")
    if args.ledger_phases or args.phases:
        phases(args)
        return
    # rounds alternate the order (alone then the extender, then the extender then alone, ...): with two,
    # A B B A, a drift of the machine's speed through the run weighs on both kinds alike
    # (with --shared, each round A B S, then S B A: the shared phase beside the whole-card one)
    kinds = ("alone", args.extender, *(["devshare-shared"] if args.shared else []))
    order = [kind for i in range(args.rounds) for kind in (kinds if i % 2 == 0 else kinds[::-1])]
    results = run_phases(args, order)
    alone = [r for r in results if r["phase"] == "alone"]
    with_it = [r for r in results if r["phase"] == args.extender]
    shared = [r for r in results if r["phase"] == "devshare-shared"]
    a, d = pooled_rate(alone), pooled_rate(with_it)
    out = {"nodes": args.nodes, "pods": args.pods, "window": args.window, "extender": args.extender,
           "rounds": args.rounds, "pods_per_s_alone": a, "pods_per_s_devshare": d,
           "ratio": round(d / a, 3), "binds_refused": sum(r["binds_refused"] for r in [*with_it, *shared])}
    if shared:
        out["pods_per_s_shared"] = pooled_rate(shared)
        out["ratio_shared"] = round(out["pods_per_s_shared"] / a, 3)
    print(json.dumps({**out, "phases": results}))


def pooled_rate(results: list[dict[str, Any]]) -> float:
    """Pods per second over several phases of as many pods each, all their pods over all their time:
    the harmonic mean of their rates."""
    return round(float(statistics.harmonic_mean(r["pods_per_s"] for r in results)), 1)


def follows_lease(kind: str) -> bool:
    """devshare as deploy/ runs it: leading while the kube-scheduler of its pod holds that one's Lease
    (``--follow-lease``); ``devshare-elect`` campaigns for a Lease of its own instead (``--leader-elect``)."""
    return kind.startswith("devshare") and kind != "devshare-elect"


def start_extender(cp: ControlPlane, which: str, *extra: str) -> None:
    """devshare's extender as deploy/ runs it (``extra``: more of its flags), or the floor extender (same
    port, same identity)."""
    if which.startswith("devshare"):
        lease = ["--follow-lease", "devshare-scheduler", "--pod-name", POD] if follows_lease(which) else []
        cp.start_extender("--log-level", "warning", *lease, *extra,
                          *(["--no-claim-ledger"] if which == "devshare-no-ledger" else []),
                          *(["--event-loop", "asyncio"] if which == "devshare-asyncio" else []),
                          *(["--no-lane"] if which == "devshare-no-lane" else []),
                          *(["--config", str(no_steer_config(cp))] if which == "devshare-no-steer" else []))
        return
    from e2e.cluster import _ok, free_port, wait_until

    port = cp.extender_port = cp.extender_port or free_port()
    floor = Path(__file__).with_name("floor_extender.py")
    hook = free_port() if which == "floor-webhook" else None
    cp.spawn("extender", [sys.executable, str(floor), "--kubeconfig", str(cp.token_kubeconfig("devshare-scheduler")),
                          "--port", str(port), *(["--annotate"] if which == "floor-annotate" else []),
                          *(["--h2"] if which == "floor-h2" else []),
                          *(["--webhook-port", str(hook), "--tls-cert", str(cp.pki / "webhook.crt"),
                             "--tls-key", str(cp.pki / "webhook.key")] if hook else [])])

    def ready() -> bool:
        if which != "floor-h2":
            return _ok(f"http://127.0.0.1:{port}/readyz")
        try:  # TLS and HTTP/2 only: a connection accepted is ready enough
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            return True
        except OSError:
            return False

    wait_until(ready, timeout=60, what="floor extender /readyz")
    if hook:
        wait_until(lambda: _ok(f"https://127.0.0.1:{hook}/readyz", cp.pki / "ca.crt"), timeout=60,
                   what="floor webhook /readyz")
        register_floor_webhook(cp, hook)


SHIPPED_CONFIG = Path(__file__).resolve().parents[1] / "deploy" / "scheduler" / "config" / "devshare-config.yaml"


def no_steer_config(cp: ControlPlane) -> Path:
    """deploy/'s configuration with ``scheduling.steerOtherPods`` off (no steering taint written)."""
    cfg = yaml.safe_load(SHIPPED_CONFIG.read_text())
    cfg["scheduling"]["steerOtherPods"] = False
    path = cp.root / "devshare-config-no-steer.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def prepare(cp: ControlPlane, nodes: int) -> BoundClock:
    """deploy/ installed, the bench namespace, ``nodes`` nodes with their Devices; the clock watching."""
    cp.install()
    cp.namespace(NS)
    t0 = time.monotonic()
    make_nodes(cp, nodes)
    print(f"{nodes} nodes + devices in {time.monotonic() - t0:.0f}s", file=sys.stderr)
    return BoundClock(cp)


def phases(args: argparse.Namespace) -> None:
    """``--phases``: each phase on one control plane, in order, its pods deleted before the next."""
    if args.ledger_phases:
        names = [{"on": "devshare", "off": "devshare-no-ledger"}.get(p.strip(), p.strip())
                 for p in args.ledger_phases.split(",") if p.strip()]
    else:
        names = [p.strip() for p in args.phases.split(",") if p.strip()]
    wrong = [p for p in names if p not in PHASES]
    if not names or wrong:
        raise SystemExit(f"--phases: a comma-separated list of {', '.join(PHASES)} (not {', '.join(wrong)})")
    results = run_phases(args, names)
    print(json.dumps({"nodes": args.nodes, "pods": args.pods, "window": args.window, "phases": results}))


def run_phases(args: argparse.Namespace, names: list[str]) -> list[dict[str, Any]]:
    """The phases ``names`` on one control plane, in order, the pods of each deleted before the next
    (each phase starts from the same cluster); each phase's result also printed on stderr."""
    results = []
    with tempfile.TemporaryDirectory(prefix="devshare-bench-e2e-") as tmp, control_plane(Path(tmp)) as cp:
        clock = prepare(cp, args.nodes)
        for i, kind in enumerate(names):
            prefix = f"p{i}-{kind}"
            # --profile: one file per extender phase, the phase's name added to the file's
            profile = (args.profile.with_name(f"{args.profile.stem}-{prefix}{args.profile.suffix}")
                       if args.profile is not None and kind != "alone" else None)
            results.append(run_phase(cp, clock, kind, prefix, args, profile=profile))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
            if i + 1 < len(names):
                clear(cp, prefix)
        clock.stop.set()
    return results


if __name__ == "__main__":
    main()
