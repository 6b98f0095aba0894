"""The offline optimum is exact: it equals a brute-force packing on small cases, forcing asks never
raises it, and no policy's replay allocates more than it (nor, when the replay placed every pod
before 95%, more than the floor)."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.sim.optimum import FLOOR_PCT, floor, optimum, solve
from support.trace import PODS_HEADER


def brute_force(cards: int, asks: list[int], capacity: int, forced: int = 0) -> int | None:
    """The most of ``asks`` (whole cards: ``capacity``) packed into ``cards`` cards, the first ``forced``
    asks always packed, by trying every assignment (index ``cards`` = left out); None if impossible."""
    best: int | None = None
    for where in itertools.product(range(cards + 1), repeat=len(asks)):
        if any(c == cards for c in where[:forced]):
            continue
        load = [0] * cards
        for a, c in zip(asks, where, strict=True):
            if c < cards:
                load[c] += a
        if all(x <= capacity for x in load):
            best = max(best or 0, sum(load))
    return best


def split(asks: list[int], capacity: int) -> tuple[Counter[int], int]:
    return Counter(a for a in asks if a < capacity), sum(a == capacity for a in asks)


@settings(max_examples=150, deadline=None)
@given(cards=st.integers(1, 3), capacity=st.sampled_from([10, 12, 1000]), data=st.data())
def test_optimum_equals_brute_force(cards: int, capacity: int, data: st.DataObject) -> None:
    sizes = st.integers(1, capacity) if capacity < 1000 else st.sampled_from(
        [50, 110, 190, 230, 320, 460, 470, 550, 590, 650, 810, 1000])
    asks = data.draw(st.lists(sizes, max_size=6))
    forced = data.draw(st.integers(0, len(asks)))
    shares, whole = split(asks, capacity)
    fshares, fwhole = split(asks[:forced], capacity)
    expected = brute_force(cards, asks, capacity, forced)
    if expected is None:
        with pytest.raises(ValueError):
            solve(cards, shares, whole, forced_shares=fshares, forced_whole=fwhole, capacity=capacity)
        return
    got = solve(cards, shares, whole, forced_shares=fshares, forced_whole=fwhole, capacity=capacity)
    assert got.exact and got.value == expected
    assert got.value <= solve(cards, shares, whole, capacity=capacity).value  # forcing never helps


def test_known_packings() -> None:
    assert solve(2, {810: 2, 190: 2}).value == 2000
    assert solve(2, {810: 2, 600: 1}).value == 1620
    assert solve(3, {500: 6}).value == 3000
    assert solve(1, {470: 2, 650: 1, 320: 1}).value == 970  # 650 + 320 beats 470 + 470
    assert solve(1, {470: 2, 650: 1, 320: 1}, forced_shares={470: 2}).value == 940
    assert solve(2, {}, 5).value == 2000
    assert solve(0, {300: 1}).value == 0
    with pytest.raises(ValueError):
        solve(1, {810: 2}, forced_shares={810: 2})


def test_no_policy_beats_the_optimum(small_trace: tuple[Path, Path], tmp_path: Path) -> None:
    from devshare.engine.policies import NAMES
    from devshare.sim.replay import replay
    from devshare.sim.runner import policy_for
    from devshare.sim.trace import load_trace

    slivers = tmp_path / "openb_pod_list_slivers.csv"  # 810 + 190 shapes: the cards see waste
    slivers.write_text(PODS_HEADER + "".join(
        f"p{i:03d},1000,1024,1,{(810, 810, 470, 1000, 320, 650, 230)[i % 7]},,LS,Running,0,0,0\n"
        for i in range(40)))
    for pods in (small_trace[1], slivers):
        trace = load_trace(small_trace[0], pods)
        for seed in (42, 43):
            opt = optimum(trace, seed)
            low = floor(trace, seed)
            for name in NAMES:
                run = replay(trace, policy_for(name, trace, seed), seed)
                assert run.unallocated_at_100 >= opt.unallocated_pct - 1e-9, (pods.name, seed, name)
                if low is not None and run.extra["first_skip_pct"] >= FLOOR_PCT:
                    assert run.unallocated_at_100 >= low.unallocated_pct - 1e-9, (pods.name, seed, name)
