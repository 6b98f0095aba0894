"""The record of refused pods (server/extender/refused.py): what /ui's queue shows, bounded."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from devshare.server.extender.refused import MAX_KEY, RefusalLog, summarize


def test_summarize_counts_nodes_per_reason_most_common_first() -> None:
    text, nodes = summarize(["no gpu"] * 3 + ["cordoned"] + ["full"] * 2 + ["x", "y"])
    assert nodes == 8
    assert text == "3 nodes: no gpu; 2 nodes: full; 1 node: cordoned; and 2 more reasons"
    assert summarize([]) == ("", 0)


def test_a_pod_keeps_its_last_refusals_and_leaves_when_placed() -> None:
    now = [100.0]
    log = RefusalLog(lambda: now[0], per_pod=2)
    for i in range(3):
        now[0] += 1
        log.refused("ns/a", "filter", f"why {i}", nodes=4)
    log.refused("ns/b", "bind", "n1: taken")
    assert [k for k, _ in log.recent(10)] == ["ns/b", "ns/a"]  # the latest refusal first
    kept = dict(log.recent(10))["ns/a"]
    assert [r.reason for r in kept] == ["why 1", "why 2"] and kept[-1].at == 103.0 and kept[-1].nodes == 4
    log.refused("ns/a", "filter", "again")
    assert [k for k, _ in log.recent(1)] == ["ns/a"]
    log.forget("ns/a")
    assert "ns/a" not in log and len(log) == 1


@given(st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=200))
def test_the_record_never_grows_past_its_bounds(events: list[tuple[int, bool]]) -> None:
    log = RefusalLog(lambda: 0.0, max_pods=10, per_pod=3)
    for pod, forget in events:
        if forget:
            log.forget(f"ns/p{pod}")
        else:
            log.refused(f"ns/p{pod}", "filter", "why")
        assert len(log) <= 10
        assert all(len(kept) <= 3 for _, kept in log.recent(100))


def test_a_caller_cannot_fill_it_with_huge_names() -> None:
    log = RefusalLog(lambda: 0.0)
    log.refused("ns/" + "x" * 10_000, "filter", "y" * 100_000)
    (key, kept), = log.recent(5)
    assert len(key) == MAX_KEY and len(kept[0].reason) <= 2000
