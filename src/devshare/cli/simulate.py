"""``devshare simulate``: replay an openb trace the way the FGD paper does and compare policies."""

from __future__ import annotations

import os
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from devshare.cli.common import fail, user_errors
from devshare.engine.policies import NAMES
from devshare.model.errors import InvalidInput
from devshare.sim.bound import allocation_bound
from devshare.sim.replay import MAX_ARRIVED, RunResult
from devshare.sim.report import group, load_reference, plot, reference_for, summary, write_json_atomic
from devshare.sim.runner import DEFAULT_NODES, DEFAULT_PODS, Job, bundled, run_all
from devshare.sim.trace import Trace, load_trace

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
    plot_out: Path | None = typer.Option(None, "--plot", help="write the allocation plot (PNG); "
                                         "default simulate.png when run without arguments"),
    workers: int = typer.Option(min(2, os.cpu_count() or 1), "--workers", help="parallel worker processes"),
) -> None:
    """Replay an openb trace as the FGD paper does and report unallocated GPU % at 100% arrival."""
    console = Console(stderr=True)
    out = Console()
    bare = nodes is None and pods is None and not policy and json_out is None and plot_out is None
    with user_errors():
        nodes_csv = nodes or bundled(DEFAULT_NODES)
        pods_csv = pods or bundled(DEFAULT_PODS)
        names = list(dict.fromkeys(policy or DEFAULT_POLICIES))
        unknown = [n for n in names if n not in NAMES]
        if unknown:
            raise InvalidInput(f"unknown policy {', '.join(unknown)}; choose from {', '.join(NAMES)}",
                               field="--policy")
        seed_list = parse_seeds(seeds)
        if workers < 1:
            raise InvalidInput("must be at least 1", field="--workers")
        for p in (json_out, plot_out):
            if p is not None and not p.resolve().parent.is_dir():
                raise InvalidInput(f"folder {p.parent} does not exist", field=str(p))
        trace = load_trace(nodes_csv, pods_csv)  # validate once, before any worker starts
        _report_oversized(console, trace)
        if bare:
            plot_out = Path("simulate.png")
        jobs = [Job(str(nodes_csv), str(pods_csv), n, s) for n in names for s in seed_list]
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
        objects = [summary(trace.name, n, group(results)[(trace.name, n)]) for n in names]
        bounds = [allocation_bound(trace, s) for s in seed_list]
        _table(out, trace.name, objects, results, reference_file(pods_csv), 100.0 - sum(bounds) / len(bounds))
        out.print(f"{len(jobs)} runs in {elapsed:.1f} s ({workers} worker(s))")
        if json_out is not None:
            write_json_atomic(json_out, objects[0] if len(objects) == 1 else objects)
            out.print(f"wrote {json_out}")
        if plot_out is not None:
            plot(objects, plot_out, title=f"{trace.name}, seeds {seeds}")
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


def _table(out: Console, trace: str, objects: list[dict[str, object]], results: list[RunResult],
           ref_path: Path, bound: float) -> None:
    ref = load_reference(ref_path)
    secs: dict[str, list[float]] = {}
    for r in results:
        secs.setdefault(r.policy, []).append(r.seconds)
    t = Table(title=f"{trace}: unallocated GPU % at 100% arrival (lower is better)")
    t.add_column("policy")
    t.add_column("mean", justify="right")
    t.add_column("median", justify="right")
    t.add_column("paper (10 seeds)", justify="right")
    t.add_column("s / run", justify="right")
    for obj in objects:
        pol = str(obj["policy"])
        u = obj["unallocated_pct_at_100"]
        assert isinstance(u, dict)
        r = reference_for(ref, trace, pol)
        t.add_row(pol, f"{u['mean']:.2f}", f"{u['median']:.2f}", "-" if r is None else f"{r:.2f}",
                  f"{sum(secs[pol]) / len(secs[pol]):.1f}")
    t.add_row("offline bound", f"{bound:.2f}", "", "", "", style="dim")
    out.print(t)


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)


__all__ = ["fail", "parse_seeds", "register", "simulate"]
