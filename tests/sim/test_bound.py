"""The offline bounds are upper bounds: no packing of the asks, found by brute force on small cases
or by any policy on a real trace, allocates more than they say."""

from __future__ import annotations

import itertools
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.sim.bound import allocation_bound, card_bound
from support.trace import PODS_HEADER


def best_packing(cards: int, asks: list[int]) -> int:
    """The most milli-GPU of ``asks`` that fit ``cards`` cards of 1000, by trying every assignment
    (an ask may also stay out: index ``cards``)."""
    best = 0
    for where in itertools.product(range(cards + 1), repeat=len(asks)):
        load = [0] * cards
        for a, c in zip(asks, where, strict=True):
            if c < cards:
                load[c] += a
        if all(x <= 1000 for x in load):
            best = max(best, sum(load))
    return best


def test_bound_sees_rooms_only_small_asks_fit() -> None:
    assert card_bound(2, [810, 810, 380]) < 2000  # the 380 fits beside neither 810
    assert card_bound(2, [810, 810, 600]) == 1620  # three asks above half a card, two cards
    assert card_bound(2, [600, 600, 400, 400]) == 2000
    assert card_bound(2, [810, 810, 190, 190]) == 2000
    assert card_bound(1, [810, 700]) == 810  # no two asks above half a card share one
    assert card_bound(3, [500] * 6) == 3000  # half a card is not above half
    assert card_bound(0, [100]) == 0
    assert card_bound(2, []) == 0


@settings(max_examples=300, deadline=None)
@given(cards=st.integers(1, 3),
       asks=st.lists(st.sampled_from([50, 110, 190, 250, 320, 470, 500, 510, 650, 810, 1000]), max_size=6))
def test_card_bound_is_never_below_the_best_packing(cards: int, asks: list[int]) -> None:
    bound = card_bound(cards, asks)
    assert best_packing(cards, asks) <= bound <= min(sum(asks), 1000 * cards)


def test_no_policy_allocates_more_than_the_bound(small_trace: tuple[Path, Path], tmp_path: Path) -> None:
    from devshare.engine.policies import NAMES
    from devshare.sim.replay import replay
    from devshare.sim.runner import policy_for
    from devshare.sim.trace import load_trace

    slivers = tmp_path / "openb_pod_list_slivers.csv"  # 810 + 190 shapes: the cards see waste
    slivers.write_text(PODS_HEADER + "".join(
        f"p{i:03d},1000,1024,1,{(810, 810, 470, 1000, 320)[i % 5]},,LS,Running,0,0,0\n" for i in range(30)))
    for pods in (small_trace[1], slivers):
        trace = load_trace(small_trace[0], pods)
        for seed in (42, 43):
            bound = allocation_bound(trace, seed)
            for name in NAMES:
                run = replay(trace, policy_for(name, trace, seed), seed)
                assert run.allocated_pct[100] <= bound + 1e-9, (pods.name, name, seed, bound)
    trace = load_trace(small_trace[0], slivers)
    assert allocation_bound(trace, 42) < 100.0
