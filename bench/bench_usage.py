"""The node agent's per-container GPU usage reader: the cost of one round (issue 39).

A node of G GPUs with P processes each (default 8 x 64 = 512 processes), each process the only one of
its container (containers of 4 per pod: 128 pods), every container holding a share of its GPU. One
round (:meth:`devshare.agent.usage.UsageReader.read`) is what the agent does every ``--usage-interval``:

- NVML: per GPU the running processes (compute and graphics) and the process utilization samples,
  through :class:`devshare.agent.nvml.NvmlBackend` on a pynvml look-alike answering from memory (the
  driver's own time is not in these figures: no GPU here; ``bench/gpu_check.sh`` times it on one);
- one ``/proc/<pid>/cgroup`` read per process (files in a temporary folder, cgroup v2 paths of the
  systemd driver and containerd, as on most nodes), parsed;
- the node's pods indexed (container IDs from their statuses, shares from their allocations) and the
  processes attributed.

CPU is ``time.process_time``; wall includes the file reads. The last line is JSON.

    .venv/bin/python bench/bench_usage.py --gpus 8 --processes 64 --rounds 50
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from devshare.agent.inventory import Gpu, Inventory
from devshare.agent.nvml import NvmlBackend
from devshare.agent.usage import PodIndex, UsageReader
from devshare.model.dialects.koordinator_names import KOORD_GPU_CORE
from support.agent import GIB, gpu, pod


class NVMLError(Exception):
    pass


class NVMLError_NotFound(NVMLError):
    pass


def fake_nvml(gpus: int, per_gpu: int) -> Any:
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    m.NVMLError_NotFound = NVMLError_NotFound  # type: ignore[attr-defined]
    m.nvmlInit = lambda: None  # type: ignore[attr-defined]
    m.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: gpus  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    m.nvmlDeviceGetUUID = lambda h: f"GPU-{h}"  # type: ignore[attr-defined]
    procs = {g: [types.SimpleNamespace(pid=1000 + g * per_gpu + k, usedGpuMemory=(k + 1) * 2**20)
                 for k in range(per_gpu)] for g in range(gpus)}
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: procs[h]  # type: ignore[attr-defined]
    m.nvmlDeviceGetGraphicsRunningProcesses = lambda h: []  # type: ignore[attr-defined]
    stamp = [0]

    def samples(h: int, since: int) -> list[Any]:
        stamp[0] += 1
        return [types.SimpleNamespace(pid=p.pid, timeStamp=stamp[0], smUtil=10, memUtil=0, encUtil=0, decUtil=0)
                for p in procs[h]]

    m.nvmlDeviceGetProcessUtilization = samples  # type: ignore[attr-defined]
    return m


def node(root: Path, gpus: int, per_gpu: int) -> tuple[UsageReader, Inventory, list[dict[str, Any]]]:
    proc = root / "proc"
    pods: list[dict[str, Any]] = []
    inv = Inventory(gpus=tuple(Gpu(minor=g, uuid=f"GPU-{g}", memory=80 * GIB) for g in range(gpus)))
    n = gpus * per_gpu
    for p in range(n // 4):
        uid = f"{p:08x}-0000-4000-8000-{p:012x}"
        containers = []
        for c in range(4):
            i = p * 4 + c
            g = i // per_gpu
            containers.append((f"c{c}", {KOORD_GPU_CORE: 1}, [gpu(g, f"GPU-{g}", 10, GIB)]))
            (proc / str(1000 + i)).mkdir(parents=True)
            (proc / str(1000 + i) / "cgroup").write_text(
                f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice/"
                f"cri-containerd-{i:064x}.scope\n")
        obj = pod(f"p{p}", "n1", containers, uid=uid, phase="Running")
        obj["status"]["containerStatuses"] = [{"name": f"c{c}", "containerID": f"containerd://{p * 4 + c:064x}"}
                                              for c in range(4)]
        pods.append(obj)
    backend = NvmlBackend(nvml=fake_nvml(gpus, per_gpu), watch_health=False)
    return UsageReader(backend, "n1", lambda fresh: pods, lambda: inv, proc=proc), inv, pods


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--processes", type=int, default=64, help="per GPU")
    ap.add_argument("--rounds", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        reader, _inv, pods = node(Path(d), args.gpus, args.processes)
        rows = reader.read()
        assert sum(r.processes for r in rows) == args.gpus * args.processes
        assert all(r.pod != "unknown" for r in rows), "every process attributed"
        parts: dict[str, list[float]] = {"round": [], "round_wall": [], "nvml": [], "cgroups": [], "index": []}
        for _ in range(args.rounds):
            c0, w0 = time.process_time(), time.perf_counter()
            reader.read()
            parts["round"].append(time.process_time() - c0)
            parts["round_wall"].append(time.perf_counter() - w0)
            c0 = time.process_time()
            procs = reader.backend.processes()
            parts["nvml"].append(time.process_time() - c0)
            c0 = time.process_time()
            from devshare.agent.cgroups import read_cgroup

            for p in procs:
                read_cgroup(reader.proc, p.pid)
            parts["cgroups"].append(time.process_time() - c0)
            c0 = time.process_time()
            PodIndex(pods, "n1")
            parts["index"].append(time.process_time() - c0)
    med = {k: round(statistics.median(v) * 1e3, 2) for k, v in parts.items()}
    print(f"{args.gpus} GPUs x {args.processes} processes ({args.gpus * args.processes} processes, "
          f"{len(pods)} pods): round {med['round']} ms CPU ({med['round_wall']} ms wall); of which NVML calls "
          f"{med['nvml']} ms, cgroups {med['cgroups']} ms, pod index {med['index']} ms (medians of {args.rounds})")
    print(json.dumps({"gpus": args.gpus, "processes_per_gpu": args.processes, "pods": len(pods),
                      "median_ms": med}))


if __name__ == "__main__":
    main()
