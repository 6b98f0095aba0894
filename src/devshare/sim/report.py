"""Summaries of replays: the JSON of DESIGN.md, the reference numbers beside ours, and the plot."""

from __future__ import annotations

import csv
import json
import os
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devshare.sim.replay import RunResult

# our policy names -> the names in the FGD authors' reference results
PAPER_NAMES = {"random": "Random", "dotprod": "DotProd", "clustering": "GpuClustering",
               "packing": "GpuPacking", "bestfit": "BestFit", "fgd": "FGD"}


def summary(trace: str, policy: str, runs: Sequence[RunResult]) -> dict[str, Any]:
    """DESIGN.md's JSON object for one policy's runs on one trace."""
    runs = sorted(runs, key=lambda r: r.seed)
    un = [r.unallocated_at_100 for r in runs]
    return {
        "trace": trace,
        "policy": policy,
        "seeds": [r.seed for r in runs],
        "allocated_pct": {str(r.seed): [round(v, 4) for v in r.allocated_pct] for r in runs},
        "unallocated_pct_at_100": {"mean": round(statistics.fmean(un), 4),
                                   "median": round(statistics.median(un), 4)},
    }


def group(results: Sequence[RunResult]) -> dict[tuple[str, str], list[RunResult]]:
    out: dict[tuple[str, str], list[RunResult]] = {}
    for r in results:
        out.setdefault((r.trace, r.policy), []).append(r)
    return out


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` through a temporary file and a rename (never half-written)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_reference(path: Path) -> dict[tuple[str, str], tuple[float, float]]:
    """(trace, paper policy name) -> (mean, sd) of unallocated % at 100% arrival."""
    out: dict[tuple[str, str], tuple[float, float]] = {}
    try:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                out[(row["trace"], row["policy"])] = (float(row["unallocated_pct_at_100_mean"]),
                                                      float(row["unallocated_pct_at_100_sd"]))
    except (OSError, KeyError, ValueError):
        return {}
    return out


def reference_for(ref: dict[tuple[str, str], tuple[float, float]], trace: str, policy: str) -> float | None:
    hit = ref.get((trace, PAPER_NAMES.get(policy, policy)))
    return hit[0] if hit else None


def plot(objects: Sequence[dict[str, Any]], out: Path, title: str = "") -> None:
    """Allocation % and unallocated % against arrived % (the FGD paper's figure 9 style)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7.5), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    x = list(range(131))
    for obj in objects:
        curves = list(obj["allocated_pct"].values())
        mean = [statistics.fmean(c[i] for c in curves) for i in x]
        label = f"{obj['policy']} ({obj['unallocated_pct_at_100']['mean']:.2f}% unallocated at 100%)"
        line = top.plot(x, mean, label=label, linewidth=1.6)[0]
        bottom.plot(x, [max(min(i, 100) - v, 0.0) for i, v in enumerate(mean)],
                    color=line.get_color(), linewidth=1.6)
    top.plot(x, [min(v, 100) for v in x], color="grey", linestyle=":", linewidth=1, label="ideal")
    top.axvline(100, color="grey", linewidth=0.8, linestyle="--")
    bottom.axvline(100, color="grey", linewidth=0.8, linestyle="--")
    top.set_ylabel("GPU allocation (% of cluster)")
    top.set_ylim(0, 102)
    top.legend(loc="lower right", fontsize=8)
    top.grid(alpha=0.3)
    top.set_title(title or "GPU allocation vs arrived workload")
    bottom.set_xlabel("arrived workload (% of cluster GPU capacity)")
    bottom.set_ylabel("arrived, not allocated (%)")
    bottom.set_xlim(0, 130)
    bottom.set_ylim(bottom=0)
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.stem}.", suffix=".png", dir=out.parent if str(out.parent) else ".")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
