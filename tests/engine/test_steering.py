"""Which nodes devshare marks so that pods it does not place go elsewhere (issue 41)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.state import ClusterState
from devshare.engine.steering import steered_nodes, whole_gpu_free
from support.cluster import add_node, bound, records


def test_a_node_is_marked_while_one_of_its_gpus_is_wholly_free() -> None:
    state = ClusterState()
    add_node(state, "empty", 2)
    add_node(state, "half", 2)
    add_node(state, "full", 2)
    add_node(state, "sick", 1, unhealthy=[0])  # an unhealthy GPU takes no work: nothing to keep free
    add_node(state, "plain", 0)
    bound(state, "a", "half", 0, core=300)
    bound(state, "b", "full", 0, core=1000)
    bound(state, "c", "full", 1, core=100)
    assert steered_nodes(state) == {"empty", "half"}
    records(state).release("default/c")
    assert steered_nodes(state) == {"empty", "half", "full"}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0, 100, 500, 1000]), min_size=1, max_size=8), min_size=1, max_size=6))
def test_marked_exactly_when_some_card_holds_nothing(cards: list[list[int]]) -> None:
    state = ClusterState()
    for i, used in enumerate(cards):
        add_node(state, f"n{i}", len(used))
        for j, core in enumerate(used):
            if core:
                bound(state, f"p{i}-{j}", f"n{i}", j, core=core)
    rows = state.node_rows()
    want = [any(c == 0 for c in cards[int(state.name_of[int(r)][1:])]) for r in rows.tolist()]
    assert whole_gpu_free(state, rows).tolist() == want
    assert not whole_gpu_free(state, np.zeros(0, np.int64)).size
