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

from devshare.model.errors import InvalidInput
from devshare.sim.optimum import FLOOR_PCT, Offline, Packing
from devshare.sim.replay import RunResult

# our policy names -> the names in the FGD authors' reference results
PAPER_NAMES = {"random": "Random", "dotprod": "DotProd", "clustering": "GpuClustering",
               "packing": "GpuPacking", "bestfit": "BestFit", "fgd": "FGD"}


def summary(trace: str, policy: str, runs: Sequence[RunResult],
            offline: Sequence[Offline] = ()) -> dict[str, Any]:
    """DESIGN.md's JSON object for one policy's runs on one trace, with (keys added to the contract)
    the offline optimum and floor per seed (:mod:`devshare.sim.optimum`), each run's seconds and the
    arrived % at its first skipped pod (the floor bounds the runs where that is at least 95), and
    under kube-scheduler's window (``--window``) its size and, per seed, the pods placed from a later
    window than their first and the scheduling cycles per pod."""
    runs = sorted(runs, key=lambda r: r.seed)
    un = [r.unallocated_at_100 for r in runs]
    out: dict[str, Any] = {
        "trace": trace,
        "policy": policy,
        "seeds": [r.seed for r in runs],
        "allocated_pct": {str(r.seed): [round(v, 4) for v in r.allocated_pct] for r in runs},
        "unallocated_pct_at_100": {"mean": round(statistics.fmean(un), 4),
                                   "median": round(statistics.median(un), 4)},
        "seconds": {str(r.seed): round(r.seconds, 3) for r in runs},
        "first_skip_pct": {str(r.seed): r.extra.get("first_skip_pct") for r in runs},
    }
    windowed = [r for r in runs if "window_nodes" in r.extra]
    if windowed:  # kube-scheduler's window (sim/window.py): its size and what it did, per seed
        pct = int(windowed[0].extra["window_percentage"])
        out["window"] = {
            "percentage_of_nodes_to_score": pct or "default",
            "nodes_to_find": int(windowed[0].extra["window_nodes"]),
            "later_window_pods": {str(r.seed): int(r.extra["window_later_pods"]) for r in windowed},
            "cycles_per_pod": {str(r.seed): r.extra["window_cycles_per_pod"] for r in windowed},
        }
    if offline:
        out["optimum_unallocated_pct_at_100"] = packing_summary({o.seed: o.optimum for o in offline})
        out["floor_unallocated_pct_at_100"] = {**packing_summary({o.seed: o.floor for o in offline}),
                                               "forced_before_pct": FLOOR_PCT}
        out["optimum_allocated_pct"] = {str(o.seed): {str(x): round(v, 4) for x, v in o.curve.items()}
                                        for o in offline}
    return out


def packing_summary(per_seed: dict[int, Packing | None]) -> dict[str, Any]:
    """Mean and median over the seeds solved, and per seed the value (null where the problem has no
    solution: the floor when the pods before 95% cannot all be packed) and the seconds."""
    vals = [p.unallocated_pct for p in per_seed.values() if p is not None]
    seeds = sorted(per_seed.items())
    return {"mean": round(statistics.fmean(vals), 4) if vals else None,
            "median": round(statistics.median(vals), 4) if vals else None,
            "per_seed": {str(s): None if p is None else round(p.unallocated_pct, 4) for s, p in seeds},
            "seconds": {str(s): None if p is None else round(p.seconds, 3) for s, p in seeds},
            "exact": all(p.exact for p in per_seed.values() if p is not None)}


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


PLOT_FORMATS = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".svg": "svg", ".pdf": "pdf"}
# one colour per policy, whatever order --policy gives them in
COLOURS = {"devshare": "#d62728", "fgd": "#1f77b4", "bestfit": "#2ca02c", "random": "#7f7f7f",
           "dotprod": "#9467bd", "clustering": "#8c564b", "packing": "#e377c2"}
EXTRA_COLOURS = ("#17becf", "#bcbd22", "#ff7f0e")
ZOOM_FROM = 85  # arrived %: below this every policy allocates everything that arrived (the inset's left edge)


def plot_format(out: Path) -> str:
    """The image format for ``out``'s suffix; a one-line error for a suffix matplotlib is not asked to write."""
    fmt = PLOT_FORMATS.get(Path(out).suffix.lower())
    if fmt is None:
        raise InvalidInput(f"cannot tell the image format from {Path(out).suffix or 'no suffix'!r}; "
                           f"name it {', '.join('*' + k for k in PLOT_FORMATS)}", field="--plot")
    return fmt


def trace_title(trace: str) -> str:
    """``openb_pod_list_gpushare40`` -> ``openb gpushare40``."""
    return f"openb {trace.removeprefix('openb_pod_list_')}" if trace.startswith("openb_pod_list_") else trace


def figure(objects: Sequence[dict[str, Any]], title: str = "") -> Any:
    """One panel: GPU allocated (% of the cluster) against arrived workload (% of its GPU capacity),
    on full axes (0-130% arrived, 0-100% allocated: no axis starts at 84), one line per policy
    labelled with the table's figure (unallocated GPU % at 100% arrival), the offline optimum (dashed)
    and the floor (x at 100%) marked where the objects carry them, and an inset that zooms on the
    range where the policies differ (85-130% arrived), its frame drawn on the main axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 7.6))
    inset = ax.inset_axes((0.47, 0.07, 0.5, 0.45))  # below the diagonal: no line runs behind it
    x_all = list(range(0, 131))
    extra = iter(EXTRA_COLOURS * 3)
    low = 100.0
    for obj in objects:
        curves = list(obj["allocated_pct"].values())
        mean = [statistics.fmean(c[i] for c in curves) for i in x_all]
        low = min(low, *mean[ZOOM_FROM:])
        colour = COLOURS.get(obj["policy"]) or next(extra, None)
        label = f"{obj['policy']}: {obj['unallocated_pct_at_100']['mean']:.2f}% unallocated at 100% arrival"
        for axes in (ax, inset):
            axes.plot(x_all, mean, label=label if axes is ax else None, linewidth=1.6, color=colour)
    opt = next((o for o in objects if "optimum_allocated_pct" in o), None)
    if opt is not None:
        per_seed = list(opt["optimum_allocated_pct"].values())
        xs = [int(k) for k in per_seed[0]]
        ys = [statistics.fmean(c[str(k)] for c in per_seed) for k in xs]
        label = (f"offline optimum (GPU only): {opt['optimum_unallocated_pct_at_100']['mean']:.2f}% "
                 "unallocated at 100% arrival")
        for axes in (ax, inset):
            axes.plot(xs, ys, color="black", linestyle="--", linewidth=1.2, marker=".",
                      label=label if axes is ax else None)
        low = min(low, *ys)
        fl = opt["floor_unallocated_pct_at_100"]["mean"]
        if fl is not None:  # where an online replay that places every pod arriving before 95% can get
            label = (f"floor (every pod arriving before {FLOOR_PCT}% placed): {fl:.2f}% unallocated at "
                     "100% arrival")
            for axes in (ax, inset):
                axes.plot([100], [100.0 - fl], color="black", marker="x", linestyle="none", markersize=8,
                          label=label if axes is ax else None)
            low = min(low, 100.0 - fl)
    for axes in (ax, inset):
        axes.plot(x_all, [min(v, 100) for v in x_all], color="grey", linestyle=":", linewidth=1,
                  label="all arrived workload allocated" if axes is ax else None)
        axes.axvline(100, color="grey", linewidth=0.8, linestyle="--")
        axes.grid(alpha=0.3)
    ax.set_xlim(0, 130)
    ax.set_ylim(0, 101)
    ax.set_xlabel("arrived workload (% of the cluster's GPU capacity)")
    ax.set_ylabel("GPU allocated (% of the cluster's GPU capacity)")
    ax.set_title(title or "GPU allocation against arrived workload")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.09), fontsize=8, frameon=False)
    inset.set_xlim(ZOOM_FROM, 130)
    inset.set_ylim(max(0.0, low - 1.0), 100.5)
    inset.set_title(f"zoom: {ZOOM_FROM}-130% arrived", fontsize=8)
    inset.tick_params(labelsize=7)
    ax.indicate_inset_zoom(inset, edgecolor="grey")
    fig.tight_layout()
    return fig


def plot(objects: Sequence[dict[str, Any]], out: Path, title: str = "") -> None:
    """Write :func:`figure` to ``out`` (format from its suffix), through a temporary file and a rename."""
    import matplotlib.pyplot as plt

    fmt = plot_format(out)
    fig = figure(objects, title)
    out = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.stem}.", suffix=out.suffix, dir=out.parent if str(out.parent) else ".")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=110, format=fmt)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        plt.close(fig)
