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

Where the time goes, per phase (on stderr, and under ``"alone"`` / ``"devshare"`` in the JSON):
CPU milliseconds per pod bound of each process (etcd, kube-apiserver, kube-scheduler, the extender;
user + system from /proc/PID/stat, from just before kube-scheduler starts until the last pod is
bound) and API requests per pod (the API server's ``apiserver_request_total`` before and after, by
verb and resource; the benchmark's own watch is one of them). ``--profile FILE`` records the
extender with py-spy during the devshare phase (a speedscope JSON) when ``py-spy`` is installed
(``pip install py-spy``; not a dependency of devshare).

The last line printed is one JSON object:
``{"nodes", "pods", "pods_per_s_alone", "pods_per_s_devshare", "ratio", "binds_refused", "alone", "devshare"}``
(``binds_refused``: binds the extender answered with an error, from its metrics; ``alone`` and
``devshare``: ``{"cpu_ms_per_pod": {process: ms}, "requests_per_pod": n, "requests": {"VERB resource": n}}``).

``--window P`` gives both kube-schedulers (alone and devshare's) the same ``percentageOfNodesToScore: P``
(the window of candidate nodes each pod is filtered over; default: kube-scheduler's adaptive one, as
deploy/ ships it), so that the two are compared at the same window (docs/deploy.md, "Large clusters").

``--ledger-phases on,off,on,off`` measures the claim ledger's cost instead, within one run: one
devshare phase per item (``--pods`` new pods each, the extender restarted with or without
``--no-claim-ledger``), each reporting pods/s, CPU per pod of each process and the API requests per
pod, as above.

    .venv/bin/python bench/bench_e2e.py --nodes 1000 --pods 3000
    .venv/bin/python bench/bench_e2e.py --nodes 5000 --pods 3000 --window 1
    .venv/bin/python bench/bench_e2e.py --nodes 1000 --pods 1000 --ledger-phases on,off,on,off
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from e2e.cluster import SCHEDULER_NAME, ControlPlane, control_plane

PLAIN = "bench.devshare.io/gpu"
NS = "bench"


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
    create(cp, [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{prefix}-{i:05d}", "namespace": NS},
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


def refused_binds(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    total = 0.0
    for line in text.splitlines():
        m = re.match(r'devshare_extender_requests_total\{[^}]*verb="bind"[^}]*result="error"[^}]*\} ([0-9.e+]+)', line)
        if m:
            total += float(m.group(1))
    return int(total)


def latencies(port: int) -> dict[str, float]:
    """Mean seconds per extender request, by verb (from its Prometheus histogram)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r'devshare_extender_request_seconds_(sum|count)\{verb="(\w+)"\} ([0-9.e+-]+)', line)
        if m:
            (sums if m.group(1) == "sum" else counts)[m.group(2)] = float(m.group(3))
    return {v: round(1000 * sums[v] / counts[v], 2) for v in sums if counts.get(v)}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


PROCESSES = ("etcd", "kube-apiserver", "kube-scheduler", "extender")


class Phase:
    """CPU seconds of each control-plane process and the API server's request counters, from
    :meth:`start` to :meth:`stop`, per pod bound."""

    def __init__(self, cp: ControlPlane, scheduler: str) -> None:
        self.cp = cp
        self.names = {"etcd": "etcd", "kube-apiserver": "kube-apiserver", "kube-scheduler": scheduler,
                      "extender": "extender"}
        self.cpu0: dict[str, float] = {}
        self.requests0: dict[str, float] = {}

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

    def stop(self, pods: int) -> dict[str, Any]:
        cpu = self._cpu()
        requests = api_requests(self.cp)
        delta = {k: v - self.requests0.get(k, 0.0) for k, v in requests.items()}
        delta = {k: v for k, v in sorted(delta.items(), key=lambda kv: -kv[1]) if v >= 1}
        return {
            "cpu_ms_per_pod": {label: round(1000 * (cpu[label] - self.cpu0.get(label, 0.0)) / pods, 2)
                               for label in PROCESSES if label in cpu},
            "requests_per_pod": round(sum(delta.values()) / pods, 2),
            "requests": {k: int(v) for k, v in list(delta.items())[:12]},
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
          f"({', '.join(f'{k} {v}' for k, v in list(phase['requests'].items())[:6])})", file=sys.stderr)


def ledger_phase(cp: ControlPlane, clock: BoundClock, prefix: str, pods: int, *, ledger: bool,
                 timeout: float) -> dict[str, Any]:
    """One devshare phase of ``--ledger-phases``: the extender (re)started with or without its claim
    ledger, ``pods`` new pods; CPU and API requests per pod as :class:`Phase` counts them."""
    cp.start_extender("--log-level", "warning", *([] if ledger else ["--no-claim-ledger"]))
    make_pods(cp, prefix, {"nvidia.com/gpu": "1"}, pods, SCHEDULER_NAME)
    time.sleep(2)  # the extender's watch takes in the pods just created
    phase = Phase(cp, "kube-scheduler")
    phase.start()
    sched = cp.start_scheduler()
    rate = clock.rate(prefix, pods, timeout)
    out = {"ledger": ledger, "pods_per_s": round(rate, 1), **phase.stop(pods),
           "binds_refused": refused_binds(cp.extender_port), "extender_ms": latencies(cp.extender_port)}
    sched.stop()
    print(json.dumps(out), file=sys.stderr, flush=True)
    return out


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


def devshare_config(cp: ControlPlane, window: int | None) -> Path:
    """deploy/'s kube-scheduler configuration (cp.scheduler_config), with ``--window`` applied."""
    import yaml

    path = cp.scheduler_config(cp.extender_port)
    cfg = yaml.safe_load(path.read_text())
    cfg["profiles"][0].update(windowed(window))
    path.write_text(yaml.safe_dump(cfg))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods", type=int, default=3000)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--profile", type=Path, default=None,
                    help="record the extender with py-spy during the devshare phase into this file (speedscope)")
    ap.add_argument("--ledger-phases", default="", help="e.g. on,off,on,off: compare the claim ledger on and off")
    ap.add_argument("--window", type=int, default=None,
                    help="percentageOfNodesToScore of both kube-schedulers (default: kube-scheduler's adaptive window)")
    args = ap.parse_args()
    if args.window is not None and not 0 < args.window <= 100:
        raise SystemExit("--window: a percentage from 1 to 100 (leave it out for kube-scheduler's adaptive window)")
    if args.ledger_phases:
        ledger_phases(args)
        return
    with tempfile.TemporaryDirectory(prefix="devshare-bench-e2e-") as tmp, control_plane(Path(tmp)) as cp:
        clock = prepare(cp, args.nodes)

        make_pods(cp, "alone", {PLAIN: "1"}, args.pods, SCHEDULER_NAME)
        phase = Phase(cp, "kube-scheduler-alone")
        phase.start()
        sched = cp.start_scheduler(config=plain_config(cp, args.window), name="kube-scheduler-alone")
        alone = clock.rate("alone", args.pods, args.timeout)
        alone_phase = phase.stop(args.pods)
        sched.stop()
        report("alone", alone, alone_phase)

        cp.start_extender("--log-level", "warning")
        make_pods(cp, "devshare", {"nvidia.com/gpu": "1"}, args.pods, SCHEDULER_NAME)
        print("devshare: scheduling", file=sys.stderr, flush=True)
        ext = cp.processes["extender"].popen
        assert ext is not None
        time.sleep(2)  # the extender's watch takes in the pods just made (not the scheduling's cost)
        phase = Phase(cp, "kube-scheduler")
        phase.start()
        profiler = start_profile(ext.pid, args.profile) if args.profile is not None else None
        cp.start_scheduler(config=devshare_config(cp, args.window))
        with_devshare = clock.rate("devshare", args.pods, args.timeout)
        devshare_phase = phase.stop(args.pods)
        if args.profile is not None:
            stop_profile(profiler, args.profile)
        report("devshare", with_devshare, devshare_phase)
        refused = refused_binds(cp.extender_port)
        print(f"extender ms per request: {latencies(cp.extender_port)}", file=sys.stderr)
        clock.stop.set()
    print(json.dumps({"nodes": args.nodes, "pods": args.pods, "window": args.window,
                      "pods_per_s_alone": round(alone, 1), "pods_per_s_devshare": round(with_devshare, 1),
                      "ratio": round(with_devshare / alone, 3),
                      "binds_refused": refused, "alone": alone_phase, "devshare": devshare_phase}))


def prepare(cp: ControlPlane, nodes: int) -> BoundClock:
    """deploy/ installed, the bench namespace, ``nodes`` nodes with their Devices; the clock watching."""
    cp.install()
    cp.namespace(NS)
    t0 = time.monotonic()
    make_nodes(cp, nodes)
    print(f"{nodes} nodes + devices in {time.monotonic() - t0:.0f}s", file=sys.stderr)
    return BoundClock(cp)


def ledger_phases(args: argparse.Namespace) -> None:
    phases = [p.strip() for p in args.ledger_phases.split(",") if p.strip()]
    if not phases or any(p not in ("on", "off") for p in phases):
        raise SystemExit("--ledger-phases: a comma-separated list of on and off")
    with tempfile.TemporaryDirectory(prefix="devshare-bench-e2e-") as tmp, control_plane(Path(tmp)) as cp:
        clock = prepare(cp, args.nodes)
        results = [ledger_phase(cp, clock, f"ledger-{i}-{p}", args.pods, ledger=p == "on", timeout=args.timeout)
                   for i, p in enumerate(phases)]
        clock.stop.set()
    print(json.dumps({"nodes": args.nodes, "pods": args.pods, "phases": results}))


if __name__ == "__main__":
    main()
