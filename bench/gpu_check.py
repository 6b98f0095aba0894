"""The node agent's NVML path on a real GPU, in one go (issue 39; run by ``bench/gpu_check.sh``).

1. **Report**: the Device object the agent would publish, from NVML (``NvmlBackend`` + ``Reporter``):
   models, memory, minors, bus ids, NUMA nodes, links, driver version, labels; and how long discovery takes.
2. **ListAndWatch**: the agent's device plugins served on a temporary directory and registered with a
   kubelet: kubelet's own device manager (``kubelet-harness`` from ``tests/e2e/build-binaries.sh``'s
   cache, when it is there) or the test suite's Python kubelet (``tests/support/kubelet.py``); the ids
   and health each resource lists, and the capacity kubelet computed.
3. **Usage**: a process holding GPU memory through the driver alone (``bench/gpu_hold.py``: libcuda +
   a PTX spin kernel, no CUDA toolkit), read by the usage reader (NVML running processes, utilization
   samples, its cgroup: a process outside any pod counts as ``unknown``); and the cost of a round.

Nothing on the GPU is changed (no clocks, modes or MIG settings): it only reads, and allocates memory in
its own process. The report is printed and written to ``$OUT/gpu-check.json`` when ``OUT`` is set.

    PYTHONPATH=src:tests python3 bench/gpu_check.py [--seconds 20] [--mib 1024]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def step(report: dict[str, Any], name: str, fn: Any) -> Any:
    """Run one step; its result or its error goes in the report, and the next steps still run."""
    t0 = time.perf_counter()
    try:
        out = fn()
        report[name] = {"ok": True, "seconds": round(time.perf_counter() - t0, 3), "result": out}
        return out
    except Exception as e:
        report[name] = {"ok": False, "seconds": round(time.perf_counter() - t0, 3), "error": f"{type(e).__name__}: {e}",
                        "trace": traceback.format_exc(limit=6)}
        return None


def report_step() -> dict[str, Any]:
    from devshare.agent.nvml import NvmlBackend
    from devshare.agent.reporter import Reporter

    backend = NvmlBackend(watch_health=False)
    try:
        t0 = time.perf_counter()
        reporter = Reporter(backend, platform.node() or "gpu-node")
        obj = reporter.build()
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        reporter.build()
        again = time.perf_counter() - t0
        inv = reporter.inventory
        return {"device": obj, "discover_first_s": round(first, 4), "discover_again_s": round(again, 4),
                "gpus": [{"minor": g.minor, "uuid": g.uuid, "model": g.model, "memory": g.memory,
                          "bus": g.pci_bus_id, "numa": g.numa_node, "healthy": g.healthy} for g in inv.gpus],
                "links": [{"a": ln.a, "b": ln.b, "nvlinks": ln.nvlinks, "pcie": ln.pcie, "via": ln.via}
                          for ln in inv.links],
                "driver": inv.driver_version}
    finally:
        backend.close()


def harness() -> Path | None:
    for b in sorted(Path.home().glob(".cache/devshare-e2e/*/bin/kubelet-harness")):
        return b
    found = shutil.which("kubelet-harness")
    return Path(found) if found else None


def list_and_watch_step() -> dict[str, Any]:
    from devshare.agent.nvml import NvmlBackend
    from devshare.agent.run import Agent

    sys.path.insert(0, str(REPO / "tests"))
    from support.agent import MemoryClient  # the tests' in-memory client (no API server on the GPU machine)

    root = Path(tempfile.mkdtemp(prefix="dsgpu", dir="/tmp"))
    backend = NvmlBackend(watch_health=False)
    node = platform.node() or "gpu-node"
    binary = harness()
    kubelet: Any
    if binary is not None:
        sys.path.insert(0, str(REPO / "tests"))
        from e2e.kubelet import Kubelet

        kubelet = Kubelet(binary, root)
        kubelet.start()
        plugin_dir = kubelet.plugin_dir
    else:
        sys.path.insert(0, str(REPO / "tests"))
        from support.kubelet import Kubelet as PyKubelet

        plugin_dir = root / "device-plugins"
        plugin_dir.mkdir()
        kubelet = PyKubelet(plugin_dir)
    agent = Agent(backend, node, MemoryClient(), plugin_dir=plugin_dir, journal=root / "agent.json",
                  usage_interval=0)
    try:
        agent.start()
        served = [r.name for r in agent.served]
        out: dict[str, Any] = {"kubelet": str(binary) if binary else "tests/support/kubelet.py", "served": served,
                               "fallback_to_node_status": list(agent.reporter.status_extra)}
        if binary is not None:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                cap = kubelet.capacity()
                if all(r in cap["capacity"] for r in served):
                    break
                time.sleep(0.2)
            out["kubelet_capacity"] = cap["capacity"]
            out["kubelet_allocatable"] = cap["allocatable"]
            cp = json.loads(kubelet.checkpoint.read_text())
            out["checkpoint_registered"] = {k: len(v) for k, v in cp["Data"]["RegisteredDevices"].items()}
        else:
            kubelet.wait_registered(len(served), timeout=30)
            lists = {}
            for r in served:
                ids = kubelet.lists[r].get(timeout=10)
                lists[r] = {"count": len(ids), "first": ids[:3],
                            "unhealthy": sum(1 for _, h in ids if h != "Healthy")}
            out["lists"] = lists
        return out
    finally:
        agent.close()
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)


def usage_step(seconds: float, mib: int) -> dict[str, Any]:
    from devshare.agent.nvml import NvmlBackend
    from devshare.agent.usage import UsageReader

    hold = subprocess.Popen([sys.executable, str(REPO / "bench" / "gpu_hold.py"), "--mib", str(mib), "--seconds",
                             str(seconds + 30)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    backend = NvmlBackend(watch_health=False)
    try:
        assert hold.stdout is not None
        line = hold.stdout.readline()
        if not line:
            raise RuntimeError(f"gpu_hold.py exited ({hold.wait()}) without holding memory")
        held = json.loads(line)
        inv = backend.discover()
        reader = UsageReader(backend, platform.node() or "gpu-node", lambda fresh: [], lambda: inv)
        rounds = []
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            t0 = time.perf_counter()
            rows = reader.read()
            took = time.perf_counter() - t0
            raw = [p for p in backend.processes() if p.pid == held["pid"]]
            rounds.append({"read_s": round(took, 4),
                           "held_process": [{"uuid": p.uuid, "memory": p.memory, "sm": p.sm} for p in raw],
                           "rows": [{"ns": r.namespace, "pod": r.pod, "container": r.container, "minor": r.minor,
                                     "memory_used": r.memory_used, "utilization": r.utilization,
                                     "processes": r.processes} for r in rows]})
            time.sleep(2)
        cgroup = Path(f"/proc/{held['pid']}/cgroup").read_text()
        return {"held": held, "cgroup_of_holder": cgroup, "rounds": rounds}
    finally:
        if hold.stdin:
            hold.stdin.close()
        try:
            hold.wait(30)
        except subprocess.TimeoutExpired:
            hold.kill()
        backend.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20, help="how long the usage reader watches the holder")
    ap.add_argument("--mib", type=int, default=1024, help="GPU memory the holder allocates")
    args = ap.parse_args()
    report: dict[str, Any] = {"host": platform.node(), "python": sys.version.split()[0],
                              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    smi = shutil.which("nvidia-smi")
    if smi:
        report["nvidia_smi"] = subprocess.run([smi, "-L"], capture_output=True, text=True).stdout
    step(report, "report", report_step)
    step(report, "list_and_watch", list_and_watch_step)
    step(report, "usage", lambda: usage_step(args.seconds, args.mib))
    text = json.dumps(report, indent=1, default=str)
    print(text)
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu-check.json").write_text(text)
    print("\nsummary: " + ", ".join(f"{k}: {'ok' if v['ok'] else 'FAILED ' + v['error']}"
                                    for k, v in report.items() if isinstance(v, dict) and "ok" in v))


if __name__ == "__main__":
    main()
