"""The replay as the live DRA comparison runs (issue 38): devshare places GPU pods, stock kube-scheduler
CPU-only pods, on one state; and the dra-baseline policy's GPU-aware window."""

from __future__ import annotations

from pathlib import Path

from devshare.engine.policies import make_policy
from devshare.engine.policies.base import StatelessPolicy
from devshare.engine.policies.binpack import BinpackPolicy
from devshare.sim.online import replay_online
from devshare.sim.replay import arrival_order, replay
from devshare.sim.trace import load_trace


class Counting(BinpackPolicy):
    def __init__(self) -> None:
        super().__init__(card_binpack=True, node_binpack=True)
        self.seen = 0

    def observe(self, pod):  # type: ignore[no-untyped-def]
        self.seen += 1


def test_cpu_only_pods_never_reach_devshares_policy(small_trace: tuple[Path, Path]) -> None:
    trace = load_trace(*small_trace)
    policy = Counting()
    result = replay_online(trace, policy, 42)
    order = arrival_order(trace, 42)[: result.pods_arrived]
    gpu_pods = sum(1 for _, p in order if p.num_gpu)
    assert 0 < gpu_pods < len(order)  # the small trace has both kinds
    assert policy.seen == gpu_pods  # CPU-only pods went to kube-scheduler, never to devshare
    assert 0 < result.pods_placed <= result.pods_arrived
    assert len(result.allocated_pct) == 131 and result.allocated_pct[130] >= result.allocated_pct[0]
    assert isinstance(make_policy("dra-baseline"), StatelessPolicy)


def test_dra_baseline_replays_within_kube_schedulers_window(small_trace: tuple[Path, Path]) -> None:
    trace = load_trace(*small_trace)
    result = replay(trace, make_policy("dra-baseline", seed=42), 42)
    assert result.extra["window_cycles_per_pod"] >= 1.0  # the GPU-aware window was walked
    assert result.pods_placed > 0


def test_steering_and_the_window_are_replayed(small_trace: tuple[Path, Path]) -> None:
    """bench/bench_replay.py --cpu-pods default-scheduler's model: GPU pods through kube-scheduler's
    window, CPU-only pods steered by devshare's taint; a replay either way."""
    trace = load_trace(*small_trace)
    for steered in (False, True):
        result = replay_online(trace, make_policy("devshare"), 42, window=0, steered=steered)
        assert 0 < result.pods_placed <= result.pods_arrived
