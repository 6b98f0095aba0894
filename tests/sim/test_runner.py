"""Running many (policy, seed) replays (:mod:`devshare.sim.runner`): results in job order whether run
here or in worker processes, progress reported per job, FGD given the trace's task classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from devshare.engine.policies.fgd import FGDPolicy
from devshare.model.errors import InvalidInput
from devshare.sim.runner import DEFAULT_NODES, DEFAULT_PODS, Job, bundled, class_counts, policy_for, run_all
from devshare.sim.trace import TracePod, load_trace


def test_the_default_trace_is_shipped_with_the_package() -> None:
    for name in (DEFAULT_NODES, DEFAULT_PODS):
        path = bundled(name)
        assert path.is_file(), path
        assert path.read_text().startswith(("sn,", "name,"))


def test_class_counts_group_pods_by_cpu_gpu_share_count_and_models() -> None:
    pods = (TracePod("a", 1000, 1024, 1, 500), TracePod("b", 1000, 4096, 1, 500),
            TracePod("c", 1000, 1024, 2, 1000), TracePod("d", 1000, 1024, 1, 500, ("V100", "T4")),
            TracePod("e", 2000, 1024, 0, 0))
    assert class_counts(pods) == {
        (1000, 500, 1, ()): 2.0,  # memory is not part of the class
        (1000, 1000, 2, ()): 1.0,
        (1000, 500, 1, ("T4", "V100")): 1.0,
        (2000, 0, 0, ()): 1.0,
    }


def test_fgd_learns_the_traces_classes_and_other_policies_get_none(small_trace: tuple[Path, Path]) -> None:
    trace = load_trace(*small_trace)
    fgd = policy_for("fgd", trace, 1)
    assert isinstance(fgd, FGDPolicy)
    assert policy_for("bestfit", trace, 1).name == "bestfit"
    with pytest.raises(InvalidInput, match="policy"):
        policy_for("no-such-policy", trace, 1)


def test_jobs_run_here_report_progress_and_come_back_in_order(small_trace: tuple[Path, Path]) -> None:
    nodes, pods = (str(p) for p in small_trace)
    jobs = [Job(nodes, pods, "bestfit", 42), Job(nodes, pods, "devshare", 42), Job(nodes, pods, "bestfit", 43)]
    ticks: list[tuple[str, int, int]] = []
    done: list[tuple[str, int]] = []
    results = run_all(jobs, workers=1, tick=lambda p, s, pct: ticks.append((p, s, pct)),
                      done=lambda r: done.append((r.policy, r.seed)))
    assert [(r.policy, r.seed) for r in results] == [(j.policy, j.seed) for j in jobs] == done
    for job in jobs:
        mine = [pct for p, s, pct in ticks if (p, s) == (job.policy, job.seed)]
        assert mine == sorted(set(mine)) and mine[-1] == 130, mine  # rising, once each, up to 130%


def test_worker_processes_give_the_same_results_in_job_order(small_trace: tuple[Path, Path]) -> None:
    nodes, pods = (str(p) for p in small_trace)
    jobs = [Job(nodes, pods, "bestfit", 42), Job(nodes, pods, "devshare", 43)]
    here = run_all(jobs, workers=1)
    ticks: list[tuple[str, int, int]] = []
    done: list[str] = []
    there = run_all(jobs, workers=2, tick=lambda p, s, pct: ticks.append((p, s, pct)),
                    done=lambda r: done.append(r.policy))
    assert [(r.policy, r.seed, r.allocated_pct, r.pods_placed) for r in there] == \
        [(r.policy, r.seed, r.allocated_pct, r.pods_placed) for r in here]
    assert sorted(done) == ["bestfit", "devshare"]
    assert {(p, s) for p, s, _ in ticks} == {("bestfit", 42), ("devshare", 43)}  # progress crossed processes
