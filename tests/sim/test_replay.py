from __future__ import annotations

import itertools
from pathlib import Path

from devshare.engine.policies import make_policy
from devshare.sim.replay import MAX_ARRIVED, arrival_order, replay
from devshare.sim.runner import policy_for
from devshare.sim.trace import load_trace


def test_inflation_reaches_130_percent(small_trace: tuple[Path, Path]) -> None:
    tr = load_trace(*small_trace)
    order = arrival_order(tr, 42)
    total = sum(p.gpu_total for _, p in order)
    assert total >= tr.gpu_capacity * 1.3
    assert total - order[-1][1].gpu_total < tr.gpu_capacity * 1.3  # stops at the first pod past it
    names = [n for n, _ in order]
    assert len(set(names)) == len(names)
    assert sorted(names[: len(tr.pods)]) == sorted(p.name for p in tr.pods)  # originals first, shuffled


def test_seed_changes_order_and_replay_is_deterministic(small_trace: tuple[Path, Path]) -> None:
    tr = load_trace(*small_trace)
    assert [n for n, _ in arrival_order(tr, 42)] != [n for n, _ in arrival_order(tr, 43)]
    for name in ("fgd", "devshare", "random", "bestfit"):
        a = replay(tr, policy_for(name, tr, 42), 42)
        b = replay(tr, policy_for(name, tr, 42), 42)
        assert a.allocated_pct == b.allocated_pct, name


def test_curve_shape(small_trace: tuple[Path, Path]) -> None:
    tr = load_trace(*small_trace)
    r = replay(tr, make_policy("bestfit"), 44)
    c = r.allocated_pct
    assert len(c) == MAX_ARRIVED + 1
    assert all(b >= a for a, b in itertools.pairwise(c))  # pods never leave
    assert all(v <= min(i + 15, 100) + 1e-9 for i, v in enumerate(c))  # never above capacity
    assert 0 < c[100] <= 100
    assert r.pods_placed <= r.pods_arrived
