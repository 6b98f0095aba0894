"""The remainder table blended with the pairing table: a gap is worth what the optimum's pairings put in it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.policies.remainder import paired_waste_tables_by_cpu, waste_tables_by_cpu
from devshare.model.request import WHOLE

CLASSES = st.dictionaries(
    st.tuples(st.sampled_from([0, 2000, 4000, 8000]), st.sampled_from([0, 110, 230, 320, 470, 650, 810, 1000]),
              st.integers(0, 2), st.just(())),
    st.floats(0.1, 10.0), min_size=1, max_size=8)


@settings(max_examples=30, deadline=None)
@given(CLASSES, st.sampled_from([0.0, 0.05, 0.2]), st.sampled_from([0.0, 0.1]))
def test_paired_tables_keep_the_shape_and_the_free_card(classes: dict, open_cost: float, kappa: float) -> None:
    steps, plain = waste_tables_by_cpu(classes, kappa)
    steps0, none = paired_waste_tables_by_cpu(classes, kappa, open_cost=open_cost, blend=0.0)
    assert np.array_equal(steps0, steps) and np.allclose(none, plain)  # no pairing: the eventual waste
    steps1, paired = paired_waste_tables_by_cpu(classes, kappa, open_cost=open_cost, blend=0.7)
    assert np.array_equal(steps1, steps) and paired.shape == plain.shape
    assert (paired[:, WHOLE] == 0).all()  # a free card wastes nothing: whole-card tasks take it
    if not any(count == 1 and 0 < milli < WHOLE for (_c, milli, count, _m) in classes):
        assert np.allclose(paired, plain)  # no share seen: no prices, the eventual waste
        return
    # row 0: no share fits the node's CPU, nothing is worth anything in a gap
    r = np.arange(WHOLE)
    assert np.allclose(paired[0, :WHOLE], 0.7 * (1 + open_cost) * r * plain[0, 1] + 0.3 * plain[0, :WHOLE])


def _cost(w: np.ndarray, gap: int, share: int) -> float:
    """What a share costs in a gap (the waste it adds: after minus before; a free card is gap 1000)."""
    return float(w[gap - share] - w[gap])


def test_shares_go_where_the_optimum_pairs_them() -> None:
    # the default trace's main shares: 650 + 320 (more 320s than 650s: three to a card), 470 + 470,
    # 590 + 370, 550 + 230 + 220; 810s alone; whole cards
    mix = {650: 25, 320: 33, 470: 75, 590: 7, 370: 5, 550: 7, 230: 14, 220: 6, 810: 108, 1000: 390}
    classes = {(4000, milli, 1, ()): float(n) for milli, n in mix.items()}
    _, plain = waste_tables_by_cpu(classes, 0.01)
    _, paired = paired_waste_tables_by_cpu(classes, 0.01, open_cost=0.1, blend=0.7)
    w, old = paired[-1], plain[-1]
    # the optimum's pairings are taken rather than a free card opened
    for gap, share in ((530, 470), (350, 320), (410, 370), (450, 230), (220, 220)):
        assert _cost(w, gap, share) < _cost(w, WHOLE, share), (gap, share)
    # a gap the optimum keeps for another share: a free card is opened instead, where the eventual
    # waste alone joins the used card (470 + 320, 470 + 370 and 650 + 220 leave 210, 160 and 130 that
    # nothing fills)
    for gap, share in ((680, 470), (530, 320), (530, 370), (350, 220)):
        assert _cost(w, WHOLE, share) < _cost(w, gap, share), (gap, share)
        assert _cost(old, gap, share) < _cost(old, WHOLE, share), (gap, share)
    # and among used cards, the pairing: a 230 takes the 450 beside a 550 (for 550 + 230 + 220), not the
    # 350 beside a 650 (for a 320)
    assert _cost(w, 450, 230) < _cost(w, 350, 230)
