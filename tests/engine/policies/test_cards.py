"""Seed 000's card-level MGPUPolicy under any node policy (``scheduling.cardPolicy``): the node policy
scores nodes, the card policy picks the card a share takes on each."""

from __future__ import annotations

import pytest

from devshare.config import API_VERSION, KIND, parse_config
from devshare.engine.build import policy_of, settings_of
from devshare.engine.policies import make_policy
from devshare.engine.policies.cards import CardPolicy
from devshare.engine.policies.devshare import DevsharePolicy
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from support.cluster import GiB, add_node, bound, gpu, pod, whole


def state_with_a_half_used_card() -> ClusterState:
    state = ClusterState()
    add_node(state, "n", gpus=3)
    bound(state, "busy", "n", 1, core=500, memory=8 * GiB)  # card 1 half used; 0 and 2 empty
    return state


def card_taken(policy: object, ask=gpu(30, 2 * GiB)) -> int:  # type: ignore[no-untyped-def]
    state = state_with_a_half_used_card()
    placed = Scheduler(state, policy=policy).place(pod("p", ask))  # type: ignore[arg-type]
    assert placed is not None
    return placed.allocation.containers[0].devices[0].minor


@pytest.mark.parametrize(("card", "minor"), [("binpack", 1), ("spread", 0)])
def test_the_card_policy_picks_the_card_under_the_devshare_node_policy(card: str, minor: int) -> None:
    cfg = parse_config({"apiVersion": API_VERSION, "kind": KIND, "scheduling": {"cardPolicy": card}})
    policy = policy_of(cfg)
    assert isinstance(policy, CardPolicy) and isinstance(policy.inner, DevsharePolicy)
    assert card_taken(policy) == minor
    assert settings_of(cfg).card_binpack is (card == "binpack")  # several containers: the DFS's cards alike


def test_auto_keeps_each_node_policys_own_cards() -> None:
    auto = parse_config({"apiVersion": API_VERSION, "kind": KIND})
    assert isinstance(policy_of(auto), DevsharePolicy) and settings_of(auto).card_binpack
    spread = parse_config({"apiVersion": API_VERSION, "kind": KIND, "scheduling": {"nodePolicy": "spread"}})
    assert not settings_of(spread).card_binpack and card_taken(policy_of(spread)) == 0
    binpack = parse_config({"apiVersion": API_VERSION, "kind": KIND, "scheduling": {"nodePolicy": "binpack"}})
    assert settings_of(binpack).card_binpack and card_taken(policy_of(binpack)) == 1
    # and node spread with binpack cards, as before the switch existed
    mixed = parse_config({"apiVersion": API_VERSION, "kind": KIND,
                          "scheduling": {"nodePolicy": "spread", "cardPolicy": "binpack"}})
    assert card_taken(policy_of(mixed)) == 1


def test_node_scores_stay_the_node_policys_and_whole_cards_its_own() -> None:
    inner = make_policy("devshare")
    wrapped = make_policy("devshare", card_binpack=False)
    assert isinstance(wrapped, CardPolicy) and wrapped.row_local and wrapped.name == "devshare (spread cards)"
    state = ClusterState()
    for n in ("a", "b"):
        add_node(state, n, gpus=2)
    bound(state, "busy", "a", 0, core=500, memory=8 * GiB)
    rows = state.node_rows()
    p = pod("p", gpu(30, 2 * GiB))
    plain = Scheduler(state, policy=inner).evaluate(p, rows).scores
    assert Scheduler(state, policy=wrapped).evaluate(p, rows).scores.tolist() == plain.tolist()
    assert card_taken(make_policy("devshare", card_binpack=True), whole(2)) == card_taken(inner, whole(2))
