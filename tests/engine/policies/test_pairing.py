"""The prices of the learned share mix: the cutting-stock LP's dual, and the most a card's gap can hold at them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.policies.pairing import best_value, share_prices


def _close(prices: dict[int, float] | None, expected: dict[int, float]) -> bool:
    assert prices is not None
    return set(prices) == set(expected) and all(math.isclose(prices[s], v, abs_tol=1e-4)
                                                for s, v in expected.items())


@pytest.mark.parametrize(("mix", "expected"), [
    ({470: 10.0}, {470: 1 / 2}),  # two to a card
    ({650: 1.0, 320: 2.0}, {650: 2 / 3, 320: 1 / 3}),  # 650 + 320, and the other 320s three to a card
    ({810: 10.0, 160: 1.0}, {810: 1.0, 160: 0.0}),  # more 190 gaps than 160s: a 160 costs nothing
    ({590: 1.0, 370: 1.0}, None),  # 590 + 370: together one card
    ({550: 1.0, 230: 1.0, 220: 1.0}, None),  # 550 + 230 + 220: together one card
])
def test_prices_of_known_mixes(mix: dict[int, float], expected: dict[int, float] | None) -> None:
    prices = share_prices(mix)
    assert prices is not None
    if expected is not None:
        assert _close(prices, expected)
    else:
        assert math.isclose(sum(prices.values()), 1.0, abs_tol=1e-4)
    # the scale of the mix does not matter
    assert _close(share_prices({s: 7 * n for s, n in mix.items()}), prices)


def test_no_share_no_price() -> None:
    assert share_prices({}) == {}
    assert share_prices({1000: 3.0, 0: 1.0}) == {}  # whole cards and nothing: not shares


MIXES = st.dictionaries(st.integers(50, 990).map(lambda s: s - s % 10), st.floats(0.05, 20.0),
                        min_size=1, max_size=6)


@settings(max_examples=40, deadline=None)
@given(MIXES)
def test_prices_are_the_dual_of_the_fewest_cards(mix: dict[int, float]) -> None:
    """No card's shares are worth more than one card (dual feasibility), and the prices of the mix add up
    to the LP's fewest cards (strong duality): between the volume bound and each size packed alone."""
    prices = share_prices(mix)
    assert prices is not None and set(prices) == set(mix)
    assert all(y >= 0 for y in prices.values())
    assert best_value(prices)[1000] <= 1 + 1e-5
    total = sum(mix.values())
    cards = sum(mix[s] * prices[s] for s in mix) / total
    volume = sum(mix[s] * s for s in mix) / total / 1000
    alone = sum(mix[s] / (1000 // s) for s in mix) / total
    assert volume - 1e-5 <= cards <= alone + 1e-5


def _brute_value(prices: dict[int, float], r: int) -> float:
    """The most a gap of r holds, by trying every multiset of the sizes."""
    best = 0.0
    for s, y in prices.items():
        if s <= r:
            best = max(best, y + _brute_value(prices, r - s))
    return best


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(1, 11), st.floats(0.0, 1.0), max_size=5))
def test_best_value_is_the_best_multiset(prices: dict[int, float]) -> None:
    v = best_value(prices, capacity=12)
    assert v.shape == (13,)
    assert np.all(np.diff(v) >= -1e-12)  # a larger gap holds at least as much
    for r in range(13):
        assert math.isclose(v[r], _brute_value(prices, r), abs_tol=1e-9)
