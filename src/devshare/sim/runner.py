"""Running many (policy, seed) replays, in parallel worker processes, with progress reports."""

from __future__ import annotations

import multiprocessing as mp
import queue
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from devshare.engine.policies import make_policy, top_classes
from devshare.engine.policies.base import Policy
from devshare.engine.policies.fgd import class_key
from devshare.sim import solver
from devshare.sim.replay import RunResult, pod_request, replay
from devshare.sim.trace import Trace, TracePod, load_trace

DEFAULT_NODES = "openb_node_list_gpu_node.csv"
DEFAULT_PODS = "openb_pod_list_default.csv"


def bundled(name: str) -> Path:
    """A file shipped in ``devshare/data/openb`` (the default trace and the reference numbers)."""
    return Path(str(resources.files("devshare") / "data" / "openb" / name))


def class_counts(pods: tuple[TracePod, ...]) -> dict[tuple[int, int, int, tuple[str, ...]], float]:
    """How many pods of the trace fall in each FGD task class (the one key of a task class,
    :func:`~devshare.engine.policies.fgd.class_key`, which devshare's policy learns by too)."""
    out: dict[tuple[int, int, int, tuple[str, ...]], float] = {}
    for p in pods:
        key = class_key(pod_request(p))
        out[key] = out.get(key, 0.0) + 1.0
    return out


def policy_for(name: str, trace: Trace, seed: int) -> Policy:
    """The named policy for a run. FGD gets the original trace's task classes (as in the paper);
    devshare learns online and gets nothing."""
    classes = top_classes(class_counts(trace.pods)) if name == "fgd" else None
    return make_policy(name, seed=seed, classes=classes)


@dataclass(frozen=True)
class Job:
    nodes: str
    pods: str
    policy: str
    seed: int
    window: int | None = None  # kube-scheduler's percentageOfNodesToScore (0: adaptive); None: every node


_TRACES: dict[tuple[str, str], Trace] = {}
_TICKS: Any = None


def _init(ticks: Any) -> None:
    global _TICKS
    _TICKS = ticks
    solver.install()  # a spawned worker's solvers print no banner into the report


def run_job(job: Job) -> RunResult:
    key = (job.nodes, job.pods)
    trace = _TRACES.get(key)
    if trace is None:
        trace = _TRACES[key] = load_trace(Path(job.nodes), Path(job.pods))
    ticks = _TICKS
    last = [-1]

    def progress(pct: int) -> None:
        if ticks is not None and pct > last[0]:
            ticks.put((job.policy, job.seed, pct))
            last[0] = pct

    return replay(trace, policy_for(job.policy, trace, job.seed), job.seed, progress=progress, window=job.window)


Tick = Callable[[str, int, int], None]  # (policy, seed, arrived %)


def run_all(jobs: Sequence[Job], *, workers: int = 2, tick: Tick | None = None,
            done: Callable[[RunResult], None] | None = None) -> list[RunResult]:
    """Run every job; results in job order. ``tick`` sees progress, ``done`` each finished run."""
    if workers <= 1 or len(jobs) <= 1:
        out = []
        for job in jobs:
            _init(_Direct(tick))
            r = run_job(job)
            _init(None)
            if done is not None:
                done(r)
            out.append(r)
        return out
    ctx = mp.get_context("spawn" if mp.get_start_method(allow_none=True) == "spawn" else "fork")
    with ctx.Manager() as manager:
        ticks = manager.Queue()
        with ctx.Pool(min(workers, len(jobs)), initializer=_init, initargs=(ticks,)) as pool:
            pending = {i: pool.apply_async(run_job, (job,)) for i, job in enumerate(jobs)}
            results: dict[int, RunResult] = {}
            while pending:
                _drain(ticks, tick, timeout=0.2)
                for i in [i for i, a in pending.items() if a.ready()]:
                    r = pending.pop(i).get()
                    results[i] = r
                    if done is not None:
                        done(r)
            _drain(ticks, tick, timeout=0.0)
    return [results[i] for i in range(len(jobs))]


class _Direct:
    def __init__(self, tick: Tick | None) -> None:
        self.tick = tick

    def put(self, item: tuple[str, int, int]) -> None:
        if self.tick is not None:
            self.tick(*item)


def _drain(ticks: Any, tick: Tick | None, timeout: float) -> None:
    try:
        item = ticks.get(timeout=timeout) if timeout else ticks.get_nowait()
        while True:
            if tick is not None:
                tick(*item)
            item = ticks.get_nowait()
    except queue.Empty:
        return
