"""The extender protocol's score scale (server/extender/scores.py): raw engine scores become 0..10 over
the nodes that fit, min-max; equal scores all get the top; an unfit node gets 0."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from devshare.server.extender.scores import MAX_SCORE, normalize, scores_from


def test_the_best_fitting_node_gets_the_top_and_an_unfit_one_zero() -> None:
    out = normalize(np.array([1.0, 3.0, 2.0, 9.0]), np.array([True, True, True, False]))
    assert out.tolist() == [0, 10, 5, 0]
    assert scores_from(np.array([4.0, 4.0])).tolist() == [MAX_SCORE, MAX_SCORE]
    assert normalize(np.array([1.0]), np.array([False])).tolist() == [0]


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50))
def test_scores_keep_their_order_within_the_range(raw: list[float]) -> None:
    out = scores_from(np.array(raw))
    assert ((out >= 0) & (out <= MAX_SCORE)).all() and out.max() == MAX_SCORE
    order = np.argsort(raw, kind="stable")
    assert (np.diff(out[order]) >= 0).all()
