"""Seed 000's card- and node-level binpack/spread (engine/policies/binpack.py): which card and which
node each picks, the score's blend of the two levels, and the one shared policy per setting."""

from __future__ import annotations

import numpy as np
import pytest

from devshare.engine.fit import FitView
from devshare.engine.handlers.base import Settings
from devshare.engine.policies.binpack import BinpackPolicy, binpack_for
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.request import PodRequest
from support.cluster import GiB, add_node, bound, gpu, pod, whole
from support.scoring import view


def two_nodes() -> ClusterState:
    """n0: four cards, card 1 at 600 of 1000 and 8 of 16 GiB used; n1: four idle cards."""
    state = ClusterState()
    add_node(state, "n0", 4)
    add_node(state, "n1", 4)
    bound(state, "a", "n0", 1, core=600, memory=8 * GiB)
    return state


def test_card_binpack_takes_the_fullest_fitting_card_and_spread_the_emptiest() -> None:
    state = two_nodes()
    ask = gpu(20, 2 * GiB)
    assert BinpackPolicy().choose(view(state, ask)).columns.tolist() == [[1], [0]]
    assert BinpackPolicy(card_binpack=False).choose(view(state, ask)).columns.tolist() == [[0], [0]]


def test_card_score_is_the_weighted_utilisation_after_the_share() -> None:
    state = two_nodes()
    ask = gpu(20, 4 * GiB)
    # n0 card 1 after: core 800/1000, memory 12/16 -> 0.5 * 0.8 + 0.5 * 0.75 = 0.775; n1 card 0: 0.2 and 0.25
    for w in (0.0, 0.5, 1.0):
        pol = BinpackPolicy(core_weight=w, card_weight=1.0)
        want = [w * 0.8 + (1 - w) * 0.75, w * 0.2 + (1 - w) * 0.25]
        assert np.allclose(pol.choose(view(state, ask)).scores, want)
        spread = BinpackPolicy(card_binpack=False, core_weight=w, card_weight=1.0)
        # spread takes an idle card on both nodes and scores what stays idle on it
        assert np.allclose(spread.choose(view(state, ask)).scores, [1 - want[1], 1 - want[1]])


def test_node_binpack_prefers_the_busier_node_and_spread_the_idler() -> None:
    state = two_nodes()
    ask = gpu(10)
    util = [(600 + 100) / 4000, 100 / 4000]
    packed = BinpackPolicy(card_weight=0.0).choose(view(state, ask)).scores
    spread = BinpackPolicy(node_binpack=False, card_weight=0.0).choose(view(state, ask)).scores
    assert np.allclose(packed, util) and np.allclose(spread, [1 - u for u in util])
    assert Scheduler(state, policy=BinpackPolicy()).place(pod("p", ask)).node == "n0"  # type: ignore[union-attr]
    spreader = BinpackPolicy(card_binpack=False, node_binpack=False)
    assert Scheduler(state, policy=spreader).place(pod("p", ask)).node == "n1"  # type: ignore[union-attr]


def test_whole_cards_are_the_lowest_free_ones_and_score_by_card_level() -> None:
    state = two_nodes()
    v = view(state, whole(2))
    got = BinpackPolicy().choose(v)
    assert got.columns.tolist() == [[0, 2], [0, 1]]
    util = [(600 + 2000) / 4000, 2000 / 4000]
    assert np.allclose(got.scores, [0.5 * 1.0 + 0.5 * u for u in util])
    spread = BinpackPolicy(card_binpack=False, node_binpack=False).choose(v)
    assert np.allclose(spread.scores, [0.5 * 0.0 + 0.5 * (1 - u) for u in util])


def test_a_pod_asking_no_device_scores_zero_everywhere() -> None:
    state = two_nodes()
    rows = state.node_rows()
    v = FitView(state, PodRequest(namespace="d", name="cpu"), rows, None, None, np.zeros((2, 0), np.bool_))
    got = BinpackPolicy().choose(v)
    assert got.scores.tolist() == [0.0, 0.0] and got.columns.shape == (2, 0)


def test_names_and_cache_key() -> None:
    assert BinpackPolicy().name == "binpack" and BinpackPolicy(card_binpack=False).name == "spread"
    ask = gpu(30)
    assert BinpackPolicy().cache_key(pod("a", ask), ask) == BinpackPolicy().cache_key(pod("b", ask, ask), ask)


@pytest.mark.parametrize(("card", "node"), [(True, True), (False, True), (True, False), (False, False)])
def test_binpack_for_shares_one_policy_per_setting(card: bool, node: bool) -> None:
    settings = Settings(card_binpack=card, node_binpack=node)
    p = binpack_for(settings, core_weight=0.25)
    assert p is binpack_for(Settings(card_binpack=card, node_binpack=node), core_weight=0.25)
    assert (p.card_binpack, p.node_binpack, p.core_weight) == (card, node, 0.25)
    assert binpack_for(settings, core_weight=1.0) is not p
