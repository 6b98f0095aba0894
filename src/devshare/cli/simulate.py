"""``devshare simulate``: replay an openb trace the way the FGD paper does and compare policies."""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from devshare.cli.common import fail, table_console, user_errors
from devshare.engine.policies import DRA_BASELINE, NAMES
from devshare.model.errors import InvalidInput
from devshare.sim.optimum import FLOOR_PCT, Offline, Packing, offline
from devshare.sim.replay import MAX_ARRIVED, RunResult
from devshare.sim.report import (
    group,
    load_reference,
    plot,
    plot_format,
    reference_for,
    summary,
    trace_title,
    write_json_atomic,
)
from devshare.sim.runner import DEFAULT_NODES, DEFAULT_PODS, Job, bundled, run_all
from devshare.sim.trace import Trace, load_trace
from devshare.sim.window import ADAPTIVE, nodes_to_find

DEFAULT_POLICIES = ("devshare", "fgd", "bestfit")
DEFAULT_SEEDS = "42-44"
REFERENCE = Path("reference") / "fgd_unallocated_at_100.csv"


def parse_seeds(text: str) -> list[int]:
    """``42-51``, ``42,43,50`` or a mix (``42-44,50``)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part[1:]:
                lo, hi = part.split("-", 1) if not part.startswith("-") else ("", "")
                a, b = int(lo), int(hi)
                if b < a:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise InvalidInput(f"{part!r} is not a seed or a range like 42-51", field="--seeds") from None
    if not out:
        raise InvalidInput("no seeds given; e.g. --seeds 42-51", field="--seeds")
    if any(s < 0 for s in out):
        raise InvalidInput("seeds must be >= 0", field="--seeds")
    return sorted(dict.fromkeys(out))


def parse_window(text: str) -> int | None:
    """``--window``: ``all`` (every node is a candidate: None), ``default`` (kube-scheduler's adaptive
    percentageOfNodesToScore: 0) or a percentage 1-100."""
    word = text.strip().lower()
    if word == "all":
        return None
    if word == "default":
        return ADAPTIVE
    try:
        pct = int(word)
    except ValueError:
        pct = -1
    if not 1 <= pct <= 100:
        raise InvalidInput(f"{text!r} is not a percentage 1-100, 'default' or 'all'", field="--window")
    return pct


def window_text(window: int | None, n_nodes: int) -> str:
    """How the report names the window: ``every node`` or ``100 of 1213 nodes (percentageOfNodesToScore 1)``."""
    if window is None:
        return "every node"
    pct = "unset: adaptive" if window == ADAPTIVE else str(window)
    return f"{nodes_to_find(n_nodes, window)} of {n_nodes} nodes (percentageOfNodesToScore {pct})"


def reference_file(pods: Path) -> Path:
    """The FGD authors' reference numbers: ``shared/reference`` beside the trace folder, else the
    bundled copy."""
    here = pods.resolve().parent.parent.parent / REFERENCE
    return here if here.exists() else bundled("fgd_unallocated_at_100.csv")


def simulate(
    nodes: Path | None = typer.Option(None, "--nodes", help="node CSV (default: the bundled openb GPU nodes)"),
    pods: Path | None = typer.Option(None, "--pods", help="pod CSV (default: the bundled openb default trace)"),
    policy: list[str] | None = typer.Option(
        None, "--policy", help=f"policy to run, repeatable: {', '.join(NAMES)} (default: devshare, fgd, bestfit)"),
    seeds: str = typer.Option(DEFAULT_SEEDS, "--seeds", help="seeds, e.g. 42-51 or 42,43"),
    json_out: Path | None = typer.Option(None, "--json", help="write the per-seed curves and summary as JSON"),
    plot_out: Path | None = typer.Option(None, "--plot", help="write the allocation plot (.png, .jpg, .svg or "
                                         ".pdf); default simulate.png when run without arguments"),
    optimum: bool = typer.Option(True, "--optimum/--no-optimum",
                                 help="solve the offline optimum and the floor per seed (HiGHS, about 1 s a seed)"),
    workers: int = typer.Option(min(2, os.cpu_count() or 1), "--workers", help="parallel worker processes"),
    window: str = typer.Option(
        "all", "--window", metavar="P|default|all",
        help="model kube-scheduler's percentageOfNodesToScore: each pod's candidates are the nodes its "
             "rotating walk finds (P percent of the nodes, at least 100; 'default': its adaptive formula), "
             "retried window after window until every node was walked; 'all' (the default): every node"),
    dra_baseline: bool = typer.Option(  # DRA (issue 38)
        False, "--dra-baseline",
        help="also replay with stock kube-scheduler's own DRA allocation (policy dra-baseline): first-fit device "
             "by index, node by LeastAllocated + BalancedAllocation on CPU and memory with random ties, within "
             "its window of GPU-feasible nodes (adaptive percentageOfNodesToScore unless --window says)"),
) -> None:
    """Replay an openb trace as the FGD paper does and report unallocated GPU % at 100% arrival."""
    console = Console(stderr=True)
    out = table_console()
    bare = (nodes is None and pods is None and not policy and json_out is None and plot_out is None
            and window == "all" and not dra_baseline)
    with user_errors():
        nodes_csv = nodes or bundled(DEFAULT_NODES)
        pods_csv = pods or bundled(DEFAULT_PODS)
        names = list(dict.fromkeys(policy or DEFAULT_POLICIES))
        if dra_baseline:
            names.append(DRA_BASELINE)
        unknown = [n for n in names if n not in (*NAMES, DRA_BASELINE)]
        if unknown:
            raise InvalidInput(f"unknown policy {', '.join(unknown)}; choose from {', '.join(NAMES)}",
                               field="--policy")
        seed_list = parse_seeds(seeds)
        pct = parse_window(window)
        if workers < 1:
            raise InvalidInput("must be at least 1", field="--workers")
        for p in (json_out, plot_out):
            if p is not None and not p.resolve().parent.is_dir():
                raise InvalidInput(f"folder {p.parent} does not exist", field=str(p))
        if plot_out is not None:
            plot_format(plot_out)
        trace = load_trace(nodes_csv, pods_csv)  # validate once, before any worker starts
        _report_oversized(console, trace)
        if bare:
            plot_out = Path("simulate.png")
        jobs = [Job(str(nodes_csv), str(pods_csv), n, s, pct) for n in names for s in seed_list]
        started = time.perf_counter()
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=False) as bar:
            task = bar.add_task(f"{trace.name}: {len(names)} policies x {len(seed_list)} seeds",
                                total=len(jobs) * MAX_ARRIVED)
            seen: dict[tuple[str, int], int] = {}

            def tick(pol: str, seed: int, pct: int) -> None:
                prev = seen.get((pol, seed), 0)
                if pct > prev:
                    bar.advance(task, pct - prev)
                    seen[(pol, seed)] = pct

            results = run_all(jobs, workers=workers, tick=tick)
        elapsed = time.perf_counter() - started
        offs: list[Offline] = []
        if optimum:
            with console.status("solving the offline optimum and floor (HiGHS)"):
                offs = [offline(trace, s) for s in seed_list]
        objects = [summary(trace.name, n, group(results)[(trace.name, n)], offs) for n in names]
        _table(out, trace.name, objects, results, reference_file(pods_csv), offs)
        if pct is not None:
            _window_note(out, window_text(pct, len(trace.nodes)), objects)
        out.print(f"{len(jobs)} runs in {elapsed:.1f} s ({workers} worker(s))")
        if json_out is not None:
            write_json_atomic(json_out, objects[0] if len(objects) == 1 else objects)
            out.print(f"wrote {json_out}")
        if plot_out is not None:
            plot(objects, plot_out, title=f"{trace_title(trace.name)}: GPU allocation against arrived workload, "
                                          f"mean of seeds {seeds}")
            out.print(f"wrote plot {plot_out.resolve()}")


def oversized_pods(trace: Trace) -> list[str]:
    """The pods of a trace that ask for more GPUs than any node has: they can never be placed."""
    most = max((n.gpus for n in trace.nodes), default=0)
    return [p.name for p in trace.pods if p.num_gpu > most]


def _report_oversized(console: Console, trace: Trace) -> None:
    big = oversized_pods(trace)
    if big:
        most = max((n.gpus for n in trace.nodes), default=0)
        shown = ", ".join(big[:5]) + (", ..." if len(big) > 5 else "")
        console.print(f"note: {len(big)} pod(s) of {trace.name} ask for more GPUs than any node has (at most "
                      f"{most}): {shown}; they count as arrived and are never placed", highlight=False, soft_wrap=True)


def _window_note(out: Console, text: str, objects: list[dict[str, object]]) -> None:
    """What kube-scheduler's window did: its size, pods placed from a later window, cycles per pod."""
    parts = []
    for obj in objects:
        w = obj["window"]
        assert isinstance(w, dict)
        later, cycles = list(w["later_window_pods"].values()), list(w["cycles_per_pod"].values())
        parts.append(f"{obj['policy']} {statistics.fmean(later):.0f} pods placed from a later window, "
                     f"{statistics.fmean(cycles):.2f} cycles a pod (mean of the seeds)")
    out.print(f"kube-scheduler's window: {text}; " + "; ".join(parts), style="dim", soft_wrap=True)


def _table(out: Console, trace: str, objects: list[dict[str, object]], results: list[RunResult],
           ref_path: Path, offs: list[Offline]) -> None:
    ref = load_reference(ref_path)
    secs: dict[str, list[float]] = {}
    skips: dict[str, list[float]] = {}
    for r in results:
        secs.setdefault(r.policy, []).append(r.seconds)
        skips.setdefault(r.policy, []).append(r.extra.get("first_skip_pct", MAX_ARRIVED))
    opt = statistics.fmean(o.optimum.unallocated_pct for o in offs) if offs else None
    floors = [o.floor.unallocated_pct for o in offs if o.floor is not None]
    flo = statistics.fmean(floors) if floors else None
    out.print(f"{trace}: unallocated GPU % at 100% arrival (lower is better)", highlight=False)
    t = Table()
    # short headers that never wrap: the table fits 80 columns, and piped it is one line a row
    t.add_column("policy", no_wrap=True)
    for header in ("mean", "median", "paper", *(("-optimum", "-floor", f"<{FLOOR_PCT}% ok") if offs else ()), "s/run"):
        t.add_column(header, justify="right", no_wrap=True)
    for obj in objects:
        pol = str(obj["policy"])
        u = obj["unallocated_pct_at_100"]
        assert isinstance(u, dict)
        paper = reference_for(ref, trace, pol)
        cells = [pol, f"{u['mean']:.2f}", f"{u['median']:.2f}", "-" if paper is None else f"{paper:.2f}"]
        if opt is not None:
            cells += [f"{u['mean'] - opt:+.2f}", "-" if flo is None else f"{u['mean'] - flo:+.2f}",
                      f"{sum(x >= FLOOR_PCT for x in skips[pol])}/{len(skips[pol])}"]
        t.add_row(*cells, f"{statistics.fmean(secs[pol]):.1f}")
    if offs:
        pad = ["", "", ""]
        rows: list[tuple[str, list[Packing | None]]] = [
            ("optimum", [o.optimum for o in offs]), ("floor", [o.floor for o in offs])]
        for label, maybe in rows:
            packs = [p for p in maybe if p is not None]
            if not packs:
                t.add_row(label, "-", "-", "", *pad, "", style="dim")
                continue
            vals = [p.unallocated_pct for p in packs]
            note = "" if all(p.exact for p in packs) else " (bound)"
            if len(packs) < len(maybe):
                note += f" ({len(packs)}/{len(maybe)} seeds)"
            t.add_row(label + note, f"{statistics.fmean(vals):.2f}", f"{statistics.median(vals):.2f}", "", *pad,
                      f"{statistics.fmean(p.seconds for p in packs):.2f}", style="dim")
    out.print(t)
    out.print("mean, median: over the seeds. paper: the FGD authors' published mean over 10 seeds (42-51). "
              "s/run: seconds per replay or solve.", style="dim")
    if offs:
        out.print(f"optimum: the exact offline optimum (HiGHS) of packing the GPU asks arrived at 100% into the "
                  f"cards, nodes, CPU and memory ignored; no policy can leave less unallocated. floor: the same "
                  f"with every pod arriving before {FLOOR_PCT}% packed; it bounds each run that placed all of "
                  f"them. -optimum, -floor: the mean minus theirs. <{FLOOR_PCT}% ok: seeds whose run placed "
                  f"every pod arriving before {FLOOR_PCT}%.", style="dim")


def register(app: typer.Typer) -> None:
    app.command("simulate", short_help="Replay an openb trace; compare policies.")(simulate)


__all__ = ["fail", "parse_seeds", "register", "simulate"]
