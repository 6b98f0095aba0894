"""What the node policies share (engine/policies/base.py): the node utilisation, the card choices of
the paper's policies, and the empty choice of a pod that asks no device."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.fit import FitView, Gather
from devshare.engine.policies.base import (
    best_fit_columns,
    empty_choice,
    lowest_columns,
    node_utilization,
)
from devshare.engine.state import ClusterState
from devshare.model.request import DeviceRequest, PodRequest
from support.cluster import add_node, bound, gpu, whole
from support.scoring import view


def test_node_utilization_is_the_share_of_compute_in_use_after_the_extra() -> None:
    state = ClusterState()
    add_node(state, "n0", 4)
    add_node(state, "n1", 2)
    bound(state, "a", "n0", 0, core=1000)
    bound(state, "b", "n1", 1, core=500)
    g = Gather(state.table("gpu"), state.node_rows())
    assert node_utilization(g, 0.0).tolist() == [1000 / 4000, 500 / 2000]
    assert node_utilization(g, 500.0).tolist() == [1500 / 4000, 1000 / 2000]


def test_node_utilization_of_a_node_without_devices_is_zero() -> None:
    state = ClusterState()
    add_node(state, "n0", 0)
    add_node(state, "n1", 1)
    g = Gather(state.table("gpu"), state.node_rows())
    assert node_utilization(g, 250.0).tolist() == [0.0, 0.25]


def test_best_fit_columns_take_the_fitting_card_with_the_least_free_for_a_share() -> None:
    state = ClusterState()
    add_node(state, "n0", 4)
    bound(state, "a", "n0", 0, core=900)  # free 100: too little
    bound(state, "b", "n0", 1, core=200)  # free 800
    bound(state, "c", "n0", 3, core=600)  # free 400: the least that fits
    v = view(state, gpu(30))
    free = state.table("gpu").free_core[v.rows]
    assert best_fit_columns(v, free).tolist() == [[3]]


def test_best_fit_columns_of_whole_cards_are_the_lowest_fitting() -> None:
    state = ClusterState()
    add_node(state, "n0", 4)
    bound(state, "a", "n0", 1, core=100)  # not free whole any more
    v = view(state, whole(2))
    free = state.table("gpu").free_core[v.rows]
    assert best_fit_columns(v, free).tolist() == [[0, 2]]
    assert lowest_columns(v, 3).tolist() == [[0, 2, 3]]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=8), st.sampled_from([100, 250, 500, 1000]))
def test_best_fit_column_fits_and_no_fitting_card_has_less_free(used: list[int], share: int) -> None:
    state = ClusterState()
    add_node(state, "n0", len(used))
    for minor, core in enumerate(used):
        if core:
            bound(state, f"p{minor}", "n0", minor, core=core)
    ask = DeviceRequest(type="gpu", count=1, core_milli=share) if share < 1000 else whole()
    v = view(state, ask)
    if not v.fits.any():
        return
    free = state.table("gpu").free_core[v.rows]
    col = int(best_fit_columns(v, free)[0, 0])
    assert v.fits[0, col]
    if not ask.whole:
        assert free[0, col] == min(int(free[0, j]) for j in np.flatnonzero(v.fits[0]))


def test_empty_choice_scores_every_row_and_takes_no_devices() -> None:
    state = ClusterState()
    for n in ("n0", "n1", "n2"):
        add_node(state, n, 2)
    rows = state.node_rows()
    v = FitView(state, PodRequest(namespace="d", name="cpu"), rows, None, None, np.zeros((3, 0), np.bool_))
    c = empty_choice(v)
    assert c.scores.tolist() == [0.0, 0.0, 0.0] and c.columns.shape == (3, 0)
    c = empty_choice(v, np.array([1.0, 2.0, 3.0]))
    assert c.scores.tolist() == [1.0, 2.0, 3.0] and c.columns.shape == (3, 0)
