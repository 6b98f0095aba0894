"""The filter's answer by node name (``NamedVerdicts``): the shortlist of the best nodes, and
``shortlisted``, which answers it without the failing nodes' reasons."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.cluster import GiB, add_node, bound, gpu, pod, whole

from devshare.engine.scheduler import PodEvaluation, Scheduler
from devshare.engine.state import ClusterState
from devshare.model.node import NodeInfo
from devshare.server.extender.nodeset import resolve
from devshare.server.extender.verdicts import NamedVerdicts, filter_nodes, shortlisted


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
    scores = data.draw(st.lists(st.sampled_from([-np.inf, 0.0, 1.5, 2.0, 7.25]), min_size=len(passed),
                                max_size=len(passed)))
    k = data.draw(st.one_of(st.just(1), st.integers(1, 14)))  # one: the deployed shortlist's own path
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


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_shortlisted_is_the_full_filters_best_nodes_without_working_out_why_others_fail(
        data: st.DataObject) -> None:
    """``shortlisted`` answers what the full filter, the held nodes taken out, then cut to the best
    ``k``, passes; None exactly when that passes nothing. When it answers, no failing node's reason
    is asked for."""
    state = ClusterState()
    n = data.draw(st.integers(1, 8))
    names = [f"n{i}" for i in range(n)]
    for i, name in enumerate(names):
        add_node(state, name, data.draw(st.integers(0, 3)), unhealthy=data.draw(st.sets(st.integers(0, 2))))
        for minor in range(data.draw(st.integers(0, 3))):
            bound(state, f"busy-{i}-{minor}", name, minor, core=data.draw(st.sampled_from([300, 700, 1000])))
    scheduler = Scheduler(state)
    ask = pod("p", data.draw(st.sampled_from([gpu(30, GiB), gpu(80), whole(), whole(2)])))
    window = data.draw(st.lists(st.sampled_from([*names, "ghost"]), unique=True, min_size=1))
    nodes = resolve(state, window)
    held = {m: "held" for m in data.draw(st.sets(st.sampled_from(names)))}
    k = data.draw(st.integers(1, 3))
    full = filter_nodes(scheduler, ask, nodes)
    if held:
        full = full.without(held)
    expected = full.best(k, state.rank)
    asked: list[int] = []
    real = PodEvaluation.reasons

    def counting(self: PodEvaluation, *args: Any) -> list[str]:
        asked.append(1)
        return real(self, *args)

    with patch.object(PodEvaluation, "reasons", counting):
        short = shortlisted(scheduler.evaluate(ask, nodes.rows), nodes, k, state.rank, held)
    if not expected.passed_idx.size:
        assert short is None
        return
    assert short is not None and not asked
    assert short.passed == expected.passed and short.passed_rows.tolist() == expected.passed_rows.tolist()
    assert short.raw_scores.tolist() == expected.raw_scores.tolist()
    assert short.failed == {} and short.unresolvable == {}
