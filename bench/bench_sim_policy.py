"""devshare's policy against FGD, BestFit, the exact offline optimum and the 95% floor, per trace and seed
(issue 14).

Traces: the openb traces in ``shared/traces/openb`` (the bundled default among them) and CPU-scarcer mixes
built as the cpuNNN traces are (``cpu250x``, ``cpu275x``, ``cpu300x``: the default trace's GPU pods and
CPU-only pods drawn, with replacement and a fixed seed, from the default trace's CPU-only pods until their
CPU is NNN/200 times cpu200's CPU-only CPU; written to ``out/traces/``, never into the repository).

    python bench/bench_sim_policy.py [--shared ../shared] [--traces default,cpu250x,...] [--seeds 42-51]
        [--policies devshare,fgd,bestfit] [--workers 1] [--out out/bench_sim_policy.json]
        [--md out/bench_sim_policy.md] [--no-offline]

Every run and every offline solve is kept in the JSON file as it finishes (a re-run resumes), and the
markdown file is rewritten after each: a summary (per trace the policies' means, the optimum and the
floor, devshare minus FGD, on how many seeds devshare is lower) and one table per trace with a row per
seed. Runs go one at a time unless ``--workers`` says otherwise (the replay is CPU-bound).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from pathlib import Path

import numpy as np

from devshare.cli.simulate import parse_seeds
from devshare.sim.optimum import floor, optimum
from devshare.sim.replay import RunResult
from devshare.sim.report import write_json_atomic
from devshare.sim.runner import Job, run_all
from devshare.sim.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
OPENB = ["default", "cpu050", "cpu100", "cpu200", "gpushare40", "gpushare60", "gpushare80", "gpushare100",
         "gpuspec10", "gpuspec20", "gpuspec25", "multigpu20", "multigpu30", "multigpu40"]
SCARCE = {"cpu250x": 250, "cpu275x": 275, "cpu300x": 300}  # built: CPU-only CPU = NNN/200 x cpu200's
TRACES = OPENB + list(SCARCE)
SCARCE_SEED = 0  # the draw of the CPU-only pods of the built traces
POD_COLUMNS = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"]


def build_scarce(openb: Path, name: str, out_dir: Path) -> Path:
    """The CPU-scarcer mix ``name`` (a key of SCARCE), built once into ``out_dir``."""
    out = out_dir / f"openb_pod_list_{name}.csv"
    if out.exists():
        return out
    with (openb / "openb_pod_list_default.csv").open(encoding="utf-8") as f:
        default = list(csv.DictReader(f))
    with (openb / "openb_pod_list_cpu200.csv").open(encoding="utf-8") as f:
        cpu200 = sum(int(r["cpu_milli"]) for r in csv.DictReader(f) if int(r["num_gpu"]) == 0)
    target = cpu200 * SCARCE[name] / 200
    cpu_only = [r for r in default if int(r["num_gpu"]) == 0]
    rng = np.random.default_rng([SCARCE_SEED, SCARCE[name]])
    drawn: list[dict[str, str]] = []
    total = 0
    while total < target:
        r = cpu_only[int(rng.integers(len(cpu_only)))]
        drawn.append(r)
        total += int(r["cpu_milli"])
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    with tmp.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(POD_COLUMNS)
        for i, r in enumerate(drawn + [r for r in default if int(r["num_gpu"]) > 0]):
            w.writerow([f"openb-pod-{i:05d}"] + [r[c] for c in POD_COLUMNS[1:]])
    tmp.replace(out)
    return out


def pods_csv(openb: Path, trace: str, out_dir: Path) -> Path:
    return build_scarce(openb, trace, out_dir / "traces") if trace in SCARCE else openb / f"openb_pod_list_{trace}.csv"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    ap.add_argument("--traces", default=",".join(TRACES))
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--policies", default="devshare,fgd,bestfit")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_sim_policy.json")
    ap.add_argument("--md", type=Path, default=ROOT / "out" / "bench_sim_policy.md")
    ap.add_argument("--no-offline", action="store_true", help="skip the optimum and the floor")
    args = ap.parse_args()
    openb = args.shared / "traces" / "openb"
    nodes = openb / "openb_node_list_gpu_node.csv"
    traces = [t for t in args.traces.split(",") if t]
    unknown = [t for t in traces if t not in TRACES]
    if unknown:
        raise SystemExit(f"error: unknown trace(s) {', '.join(unknown)}; choose from {', '.join(TRACES)}")
    seeds = parse_seeds(args.seeds)
    policies = [p for p in args.policies.split(",") if p]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, list[dict[str, object]]] = (json.loads(args.out.read_text()) if args.out.exists()
                                                else {"runs": [], "offline": []})
    paths = {t: pods_csv(openb, t, args.out.parent) for t in traces}

    def save() -> None:
        write_json_atomic(args.out, data)
        args.md.write_text(markdown(data, traces, policies, seeds))

    if not args.no_offline:
        solve_offline(nodes, paths, seeds, data, save)
    have = {(d["trace"], d["policy"], d["seed"]) for d in data["runs"]}
    jobs = [Job(str(nodes), str(paths[t]), p, s) for t in traces for s in seeds for p in policies
            if (f"openb_pod_list_{t}", p, s) not in have]
    started = time.perf_counter()

    def record(r: RunResult) -> None:
        data["runs"].append({"trace": r.trace, "policy": r.policy, "seed": r.seed,
                             "unallocated": r.unallocated_at_100, "seconds": r.seconds,
                             "first_skip_pct": r.extra.get("first_skip_pct")})
        save()
        print(f"{r.trace} {r.policy} {r.seed}: {r.unallocated_at_100:.3f}% ({r.seconds:.1f} s)", flush=True)

    print(f"{len(jobs)} runs to do", flush=True)
    save()
    run_all(jobs, workers=args.workers, done=record)
    print(f"all done in {time.perf_counter() - started:.0f} s")
    print(args.md.read_text())


def solve_offline(nodes: Path, paths: dict[str, Path], seeds: list[int], data: dict[str, list[dict[str, object]]],
                  save: object) -> None:
    """The optimum and the floor of every (trace, seed) not solved yet."""
    have = {(d["trace"], d["seed"]) for d in data["offline"]}
    for t, path in paths.items():
        name = f"openb_pod_list_{t}"
        todo = [s for s in seeds if (name, s) not in have]
        if not todo:
            continue
        trace = load_trace(nodes, path)
        for s in todo:
            opt, low = optimum(trace, s), floor(trace, s)
            data["offline"].append({"trace": name, "seed": s, "optimum": opt.unallocated_pct,
                                    "optimum_s": opt.seconds, "floor": None if low is None else low.unallocated_pct,
                                    "floor_s": None if low is None else low.seconds})
            save()  # type: ignore[operator]
            print(f"{name} {s}: optimum {opt.unallocated_pct:.3f}%, floor "
                  f"{'-' if low is None else f'{low.unallocated_pct:.3f}%'}", flush=True)


def markdown(data: dict[str, list[dict[str, object]]], traces: list[str], policies: list[str],
             seeds: list[int]) -> str:
    runs = {(str(d["trace"]), str(d["policy"]), int(d["seed"])): d for d in data["runs"]}  # type: ignore[call-overload]
    off = {(str(d["trace"]), int(d["seed"])): d for d in data["offline"]}  # type: ignore[call-overload]

    def value(t: str, p: str, s: int) -> float | None:
        d = runs.get((f"openb_pod_list_{t}", p, s))
        return None if d is None else float(d["unallocated"])  # type: ignore[arg-type]

    def bound(t: str, key: str, s: int) -> float | None:
        d = off.get((f"openb_pod_list_{t}", s))
        return None if d is None or d[key] is None else float(d[key])  # type: ignore[arg-type]

    def mean(xs: list[float | None]) -> str:
        got = [x for x in xs if x is not None]
        return "" if not got else f"{statistics.fmean(got):.2f}" + ("" if len(got) == len(xs) else f" (n={len(got)})")

    cols = [*policies, "optimum", "floor"]
    lines = ["# devshare's policy per trace and seed (bench/bench_sim_policy.py)", "",
             f"Unallocated GPU % at 100% arrived workload, seeds {seeds[0]}-{seeds[-1]} (mean; n = seeds "
             "finished where fewer). optimum / floor: the exact offline optimum and the floor of a replay "
             "that places every pod arriving before 95% (`sim/optimum.py`; - : no solution).", "",
             "| trace | " + " | ".join(cols) + " | devshare - fgd | devshare lower | devshare - floor |",
             "| --- | " + " | ".join("---" for _ in cols) + " | --- | --- | --- |"]
    for t in traces:
        per = {p: [value(t, p, s) for s in seeds] for p in policies}
        opt = [bound(t, "optimum", s) for s in seeds]
        low = [bound(t, "floor", s) for s in seeds]
        cells = [mean(per[p]) for p in policies] + [mean(opt), mean(low)]
        diff = lower = gap = ""
        if "devshare" in per and "fgd" in per:
            pairs = [(a, b) for a, b in zip(per["devshare"], per["fgd"], strict=True)
                     if a is not None and b is not None]
            if pairs:
                diff = f"{statistics.fmean(a - b for a, b in pairs):+.2f}"
                lower = f"{sum(a < b for a, b in pairs)}/{len(pairs)}"
        if "devshare" in per:
            pairs2 = [(a, b) for a, b in zip(per["devshare"], low, strict=True) if a is not None and b is not None]
            if pairs2:
                gap = f"{statistics.fmean(a - b for a, b in pairs2):+.2f}"
        lines.append(f"| {t} | " + " | ".join(cells) + f" | {diff} | {lower} | {gap} |")
    for t in traces:
        lines += ["", f"### {t}", "", "| seed | " + " | ".join(cols) + " |",
                  "| --- | " + " | ".join("---" for _ in cols) + " |"]
        for s in seeds:
            xs = [value(t, p, s) for p in policies] + [bound(t, "optimum", s), bound(t, "floor", s)]
            lines.append(f"| {s} | " + " | ".join("" if x is None else f"{x:.2f}" for x in xs) + " |")
    secs = {p: [float(d["seconds"]) for d in data["runs"] if d["policy"] == p] for p in policies}  # type: ignore[arg-type]
    lines += ["", "Seconds per run (mean over every run kept): " + ", ".join(
        f"{p} {statistics.fmean(v):.1f} s ({len(v)} runs)" for p, v in secs.items() if v)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
