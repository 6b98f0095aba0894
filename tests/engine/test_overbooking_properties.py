"""Invariant (issue 12): allocations found on pods, recorded through ``Lifecycle.add_watched`` in any order,
of any size, with the same pod recorded again or released at any time, never book a card beyond its
compute or memory; each one refused leaves the state exactly as it was; and one is refused exactly
when adding it would over-book a card (the reference sum below, kept apart from the state's tables)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.state import ClusterState
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from support.cluster import GiB, add_node, pod, records, usage_key

NODES = {"a": 2, "b": 1}  # GPUs per node, 16 GiB each
CORE, MEMORY = 1000, 16 * GiB

grant = st.tuples(st.sampled_from(list(NODES)), st.integers(0, 1), st.sampled_from([0, 200, 400, 600, 1000]),
                  st.sampled_from([0, 2 * GiB, 6 * GiB, 10 * GiB, 16 * GiB]))
step = st.one_of(
    st.tuples(st.just("record"), st.integers(0, 5), grant, st.booleans()),
    st.tuples(st.just("release"), st.integers(0, 5)),
)


def allocation(node: str, minor: int, core: int, memory: int, twice: bool) -> PodAllocation:
    """One or two containers on one card (two: the pod's own grants add up on the card)."""
    minor = minor % NODES[node]
    g = DeviceGrant(type="gpu", minor=minor, id=f"GPU-{node}-{minor}", core_milli=core, memory=memory)
    cs = [ContainerAllocation(name="c0", devices=(g,))]
    if twice:
        cs.append(ContainerAllocation(name="c1", devices=(g,)))
    return PodAllocation(node=node, containers=tuple(cs))


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(step, max_size=40))
def test_recorded_allocations_never_over_book_a_card(steps: list[tuple[object, ...]]) -> None:
    state = ClusterState()
    for name, count in NODES.items():
        add_node(state, name, count)
    held: dict[str, PodAllocation] = {}  # the reference: what must be counted
    cache = records(state)

    def usage(allocs: dict[str, PodAllocation]) -> dict[tuple[str, int], list[int]]:
        out: dict[tuple[str, int], list[int]] = {}
        for a in allocs.values():
            for _, g in a.grants():
                u = out.setdefault((a.node, g.minor), [0, 0])
                u[0] += g.core_milli
                u[1] += g.memory
        return out

    for s in steps:
        key = f"p{s[1]}"
        if s[0] == "release":
            cache.release(f"default/{key}")
            held.pop(key, None)
        else:
            node, minor, core, memory = s[2]  # type: ignore[misc]
            alloc = allocation(node, minor, core, memory, bool(s[3]))
            before = usage_key(state)
            reason = cache.add_watched(pod(key), alloc)
            candidate = {k: v for k, v in held.items() if k != key} | {key: alloc}
            fits = all(c <= CORE and m <= MEMORY for c, m in usage(candidate).values())
            assert (reason is None) == fits, (reason, candidate)
            if reason is None:
                held = candidate
            else:
                assert usage_key(state) == before  # a refusal changes nothing
        for (node, minor), (core, mem) in usage(held).items():
            row = state.row_of[node]
            t = state.tables["gpu"]
            col = t.column_of(row, minor)
            assert (int(t.used_core[row, col]), int(t.used_mem[row, col])) == (core, mem)
            assert core <= CORE and mem <= MEMORY
        assert {k.split("/")[1] for k in state.pods} == set(held)
