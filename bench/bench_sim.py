"""Full openb benchmark: every trace in shared/traces/openb, every policy, seeds 42..51.

Results go to a JSON file as each run finishes (partial results survive; a re-run resumes), and a
markdown table (out/bench_sim.md, copied into BENCHMARKS.md's simulator section) is rewritten after
every run with the table so far: our mean unallocated GPU % at 100% arrival next to the FGD authors'
reference, and the seconds per run.

    python bench/bench_sim.py [--shared ../shared] [--workers 2] [--seeds 42-51] [--out FILE.json]
        [--policies fgd,bestfit,...] [--traces default,...] [--md FILE.md] [--offline-out FILE.json]

The exact offline optimum and the 95% floor (``devshare.sim.optimum``) of every trace and seed are
solved first (resumable too, in ``out/bench_offline.json``), and the table gives each policy's
distance to both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from devshare.cli.simulate import parse_seeds
from devshare.engine.policies import NAMES
from devshare.sim.optimum import floor, optimum
from devshare.sim.replay import RunResult
from devshare.sim.report import load_reference, reference_for, write_json_atomic
from devshare.sim.runner import Job, run_all
from devshare.sim.trace import load_trace

ROOT = Path(__file__).resolve().parent.parent
TRACE_ORDER = ["default", "cpu050", "cpu100", "cpu200", "gpushare40", "gpushare60", "gpushare80", "gpushare100",
               "gpuspec10", "gpuspec20", "gpuspec25", "multigpu20", "multigpu30", "multigpu40"]


def _mean_unallocated(runs: list[dict[str, object]]) -> float | None:
    """Mean unallocated GPU % at 100% over a trace's runs of one policy (None: no run)."""
    if not runs:
        return None
    return statistics.fmean(float(r["unallocated"]) for r in runs)  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--policies", default=",".join(NAMES))
    ap.add_argument("--traces", default=",".join(TRACE_ORDER))
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "bench_sim.json")
    ap.add_argument("--md", type=Path, default=ROOT / "out" / "bench_sim.md")
    ap.add_argument("--offline-out", type=Path, default=ROOT / "out" / "bench_offline.json")
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.md.parent.mkdir(parents=True, exist_ok=True)
    traces_dir = args.shared / "traces" / "openb"
    nodes = traces_dir / "openb_node_list_gpu_node.csv"
    ref = load_reference(args.shared / "reference" / "fgd_unallocated_at_100.csv")
    seeds = parse_seeds(args.seeds)
    policies = args.policies.split(",")
    offline = solve_offline(nodes, traces_dir, args.traces.split(","), seeds, args.offline_out)
    done: list[dict[str, object]] = json.loads(args.out.read_text()) if args.out.exists() else []
    have = {(d["trace"], d["policy"], d["seed"]) for d in done}
    jobs = [Job(str(nodes), str(traces_dir / f"openb_pod_list_{t}.csv"), p, s)
            for t in args.traces.split(",") for p in policies for s in seeds
            if (f"openb_pod_list_{t}", p, s) not in have]
    started = time.perf_counter()

    def record(r: RunResult) -> None:
        done.append({"trace": r.trace, "policy": r.policy, "seed": r.seed, "unallocated": r.unallocated_at_100,
                     "allocated_pct": r.allocated_pct, "seconds": r.seconds, "pods": r.pods_arrived,
                     "first_skip_pct": r.extra.get("first_skip_pct")})
        write_json_atomic(args.out, done)
        args.md.write_text(markdown(done, ref, policies, len(seeds), offline))
        print(f"{r.trace} {r.policy} {r.seed}: {r.unallocated_at_100:.2f}% ({r.seconds:.1f} s)", flush=True)

    print(f"{len(jobs)} runs to do", flush=True)
    args.md.write_text(markdown(done, ref, policies, len(seeds), offline))
    run_all(jobs, workers=args.workers, done=record)
    print(f"all done in {time.perf_counter() - started:.0f} s")


def solve_offline(nodes: Path, traces_dir: Path, traces: list[str], seeds: list[int],
                  out: Path) -> list[dict[str, object]]:
    """The optimum and the floor of every (trace, seed), solved once and kept in ``out``."""
    done: list[dict[str, object]] = json.loads(out.read_text()) if out.exists() else []
    have = {(d["trace"], d["seed"]) for d in done}
    for t in traces:
        name = f"openb_pod_list_{t}"
        if all((name, s) in have for s in seeds):
            continue
        trace = load_trace(nodes, traces_dir / f"{name}.csv")
        for s in seeds:
            if (name, s) in have:
                continue
            opt, low = optimum(trace, s), floor(trace, s)
            done.append({"trace": name, "seed": s, "optimum": opt.unallocated_pct, "optimum_s": opt.seconds,
                         "optimum_exact": opt.exact, "floor": None if low is None else low.unallocated_pct,
                         "floor_s": None if low is None else low.seconds})
            write_json_atomic(out, done)
            print(f"{name} {s}: optimum {opt.unallocated_pct:.3f}% ({opt.seconds:.2f} s), floor "
                  f"{'-' if low is None else f'{low.unallocated_pct:.3f}% ({low.seconds:.2f} s)'}", flush=True)
    return done


def markdown(done: list[dict[str, object]], ref: dict[tuple[str, str], tuple[float, float]],
             policies: list[str], n_seeds: int, offline: list[dict[str, object]] | None = None) -> str:
    by: dict[tuple[str, str], list[dict[str, object]]] = {}
    for d in done:
        by.setdefault((str(d["trace"]), str(d["policy"])), []).append(d)
    traces = [t for t in (f"openb_pod_list_{x}" for x in TRACE_ORDER) if any(k[0] == t for k in by)]
    lines = [
        "# Simulator benchmark (openb traces)",
        "",
        "Mean unallocated GPU % at 100% arrived workload over the seeds run (target: seeds 42..51), ours / "
        "the FGD authors' published reference (`shared/reference/fgd_unallocated_at_100.csv`). "
        "n = seeds finished. Generated by `bench/bench_sim.py` (2 worker processes on the 2-core dev box "
        "shared with other work, so seconds are indicative).",
        "",
        "| trace | " + " | ".join(policies) + " |",
        "| --- | " + " | ".join("---" for _ in policies) + " |",
    ]
    for t in traces:
        cells = []
        for p in policies:
            runs = by.get((t, p), [])
            mean = _mean_unallocated(runs)
            if mean is None:
                cells.append("")
                continue
            r0 = reference_for(ref, t, p)
            n = "" if len(runs) == n_seeds else f" (n={len(runs)})"
            cells.append(f"{mean:.2f}" + (f" / {r0:.2f}" if r0 is not None else "") + n)
        lines.append(f"| {t.removeprefix('openb_pod_list_')} | " + " | ".join(cells) + " |")
    if offline:
        lines += offline_table(by, offline, policies, traces)
    lines += ["", "Seconds per run (mean over every trace finished):", ""]
    for p in policies:
        secs = [float(d["seconds"]) for d in done if d["policy"] == p]  # type: ignore[arg-type]
        if secs:
            lines.append(f"- {p}: {statistics.fmean(secs):.1f} s ({len(secs)} runs)")
    return "\n".join(lines) + "\n"


def offline_table(by: dict[tuple[str, str], list[dict[str, object]]], offline: list[dict[str, object]],
                  policies: list[str], traces: list[str]) -> list[str]:
    """Per trace: the optimum and the floor (means over the seeds), and each policy's distance to both
    (its mean minus theirs), with how many of its runs placed every pod arriving before 95%."""
    lines = ["", "Distance to the exact offline optimum and to the 95% floor (points of unallocated GPU; "
             "the policy's mean minus the bound's, over the same seeds; n95 = runs that placed every pod "
             "arriving before 95%, the runs the floor bounds):", "",
             "| trace | optimum | floor | solve s | " + " | ".join(f"{p} - opt / - floor (n95)" for p in policies)
             + " |", "| --- | --- | --- | --- | " + " | ".join("---" for _ in policies) + " |"]
    for t in traces:
        rows = [d for d in offline if d["trace"] == t]
        if not rows:
            continue
        opt = statistics.fmean(float(d["optimum"]) for d in rows)  # type: ignore[arg-type]
        floors = [float(d["floor"]) for d in rows if d["floor"] is not None]  # type: ignore[arg-type]
        low = statistics.fmean(floors) if floors else None
        secs = statistics.fmean(float(d["optimum_s"]) + float(d["floor_s"] or 0.0)  # type: ignore[arg-type]
                                for d in rows)
        cells = []
        for p in policies:
            runs = by.get((t, p), [])
            mean = _mean_unallocated(runs)
            if mean is None:
                cells.append("")
                continue
            n95 = sum(1 for r in runs if float(r.get("first_skip_pct") or 0.0) >= 95.0)  # type: ignore[arg-type]
            cells.append(f"{mean - opt:+.2f} / " + ("-" if low is None else f"{mean - low:+.2f}") +
                         f" ({n95}/{len(runs)})")
        lines.append(f"| {t.removeprefix('openb_pod_list_')} | {opt:.2f} | "
                     + ("-" if low is None else f"{low:.2f}") + f" | {secs:.1f} | " + " | ".join(cells) + " |")
    return lines


if __name__ == "__main__":
    main()
