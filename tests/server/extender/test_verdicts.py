"""The filter's answer by node name (``NamedVerdicts``): the shortlist of the best nodes."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.state import ClusterState
from devshare.model.node import NodeInfo
from devshare.server.extender.nodeset import resolve
from devshare.server.extender.verdicts import NamedVerdicts


def verdicts(n: int, passed: list[int], scores: list[float]) -> tuple[NamedVerdicts, ClusterState]:
    state = ClusterState()
    names = [f"n{i}" for i in range(n)]
    for name in names:
        state.upsert_node(NodeInfo(name=name))
    nodes = resolve(state, names)
    idx = np.array(passed, np.int64)
    failed = {names[i]: "full" for i in range(n) if i not in passed}
    ev: Any = None
    return NamedVerdicts(nodes, idx, nodes.rows[idx], np.array(scores, np.float64), failed, {"ghost": "unknown"},
                         ev), state


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_best_keeps_the_k_highest_scores_ties_by_rank(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 12))
    passed = data.draw(st.lists(st.integers(0, n - 1), unique=True))
    scores = data.draw(st.lists(st.sampled_from([0.0, 1.5, 2.0, 7.25]), min_size=len(passed), max_size=len(passed)))
    k = data.draw(st.integers(1, 14))
    v, state = verdicts(n, passed, scores)
    rank = state.rank.copy()
    data.draw(st.randoms()).shuffle(rank)  # any tie-break order
    best = v.best(k, rank)
    if k >= len(passed):
        assert best is v  # nothing to cut: the answer as it was
        return
    expected = sorted(range(len(passed)), key=lambda j: (-scores[j], rank[v.passed_rows[j]]))[:k]
    assert best.passed_rows.tolist() == [int(v.passed_rows[j]) for j in expected]
    assert best.passed == [v.passed[j] for j in expected]
    assert best.raw_scores.tolist() == [scores[j] for j in expected]
    assert best.failed == v.failed and best.unresolvable == v.unresolvable  # the others did not fail
    assert best.passed_json() == v.nodes.names_json(best.passed_idx)
