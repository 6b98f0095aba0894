"""The assume/bind lifecycle (engine/lifecycle.py): one owner of assume, confirm, forget and expiry,
and of the policy's hooks."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.policies.binpack import BinpackPolicy
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.request import PodRequest
from support.cluster import GiB, add_node, gpu, pod, usage_key


class Recording(BinpackPolicy):
    def __init__(self) -> None:
        super().__init__()
        self.observed: list[str] = []
        self.placements: list[tuple[str, int]] = []

    def observe(self, pod: PodRequest) -> None:
        self.observed.append(pod.key)

    def placed(self, pod: PodRequest, row: int) -> None:
        self.placements.append((pod.key, row))


def lifecycle(nodes: int = 2) -> tuple[Lifecycle, Recording]:
    state = ClusterState()
    for i in range(nodes):
        add_node(state, f"n{i}", 2)
    policy = Recording()
    return Lifecycle(Scheduler(state, policy=policy), ttl=30.0), policy


def test_schedule_tells_the_policy_once_before_and_after() -> None:
    lc, policy = lifecycle()
    p = pod("a", gpu(50, GiB))
    placed = lc.schedule(p, now=0.0)
    assert placed is not None
    assert policy.observed == ["default/a"]
    assert policy.placements == [("default/a", lc.state.row_of[placed.node])]
    assert lc.state.pods["default/a"].phase == "bound"
    lc.arrived(p)  # the same pod again (a retried filter): not observed twice
    assert policy.observed == ["default/a"]


def test_a_bind_in_flight_never_expires() -> None:
    lc, _ = lifecycle()
    p = pod("a", gpu(50, GiB))
    placed = lc.scheduler.place(p)
    assert placed is not None
    lc.assume(p, placed.allocation, now=0.0)
    with lc.bind_in_flight(p.key):
        assert lc.binding(p.key)
        assert lc.expire(1000.0) == []
    assert not lc.binding(p.key)
    assert lc.expire(29.0) == []
    assert lc.expire(30.0) == ["default/a"]
    assert lc.state.pods == {}


def test_confirm_after_expiry_records_the_annotation_as_truth() -> None:
    lc, policy = lifecycle(1)
    p = pod("a", gpu(50, GiB))
    placed = lc.scheduler.place(p)
    assert placed is not None
    lc.assume(p, placed.allocation, now=0.0)
    assert lc.expire(31.0) == ["default/a"]
    assert lc.confirm(p, placed.allocation) is None
    assert lc.state.pods["default/a"].phase == "bound"
    assert policy.placements == [("default/a", 0)]


def test_forget_only_undoes_the_allocation_it_was_given() -> None:
    lc, _ = lifecycle(1)
    p = pod("a", gpu(50, GiB))
    placed = lc.scheduler.place(p)
    assert placed is not None
    before = usage_key(lc.state)
    lc.assume(p, placed.allocation, now=0.0)
    other = lc.scheduler.place(pod("b", gpu(10, GiB)))
    assert other is not None
    assert not lc.forget(p.key, other.allocation)
    assert lc.forget(p.key, placed.allocation)
    assert usage_key(lc.state) == before
    lc.schedule(p, now=0.0)
    assert not lc.forget(p.key)  # bound: left alone


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["assume", "confirm", "forget", "expire", "fly"]),
                                st.integers(0, 3), st.floats(0, 50)), max_size=30))
def test_expiry_drops_exactly_the_assumed_past_their_time_and_not_in_flight(
        steps: list[tuple[str, int, float]]) -> None:
    lc, _ = lifecycle()
    now = 0.0
    flying: set[str] = set()
    open_binds = []  # kept referenced: a collected context manager would end its bind
    for op, i, dt in steps:
        p = pod(f"p{i}", gpu(30, GiB))
        if op == "assume":
            placed = lc.scheduler.place(p) if p.key not in lc.state.pods else None
            if placed is not None:
                lc.assume(p, placed.allocation, now=now, ttl=dt)
        elif op == "confirm" and p.key in lc.state.pods:
            lc.confirm(p, lc.state.pods[p.key].allocation)
        elif op == "forget":
            lc.forget(p.key)
        elif op == "fly":
            cm = lc.bind_in_flight(p.key)
            cm.__enter__()
            open_binds.append(cm)
            flying.add(p.key)
        else:
            now += dt
            due = {k for k, r in lc.state.pods.items() if r.phase == "assumed" and r.expires_at is not None
                   and r.expires_at <= now and k not in flying}
            kept = set(lc.state.pods) - due
            assert set(lc.expire(now)) == due
            assert set(lc.state.pods) == kept


MUTATORS = {"_assume", "_bind", "_release", "_release_finished", "_add_bound", "_add_bound_checked", "_add_placed",
            "_set_plain", "_remove_plain"}


def test_only_the_lifecycle_changes_the_records() -> None:
    """The one cache (issue 35): ClusterState's record mutators are private to engine/lifecycle.py; no other
    module of src/devshare calls them (state.py defines them and calls its own)."""
    import ast

    from support import REPO

    src = REPO / "src" / "devshare"
    callers = []
    for path in sorted(src.rglob("*.py")):
        if path.relative_to(src).as_posix() in ("engine/lifecycle.py", "engine/state.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            own = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
            if isinstance(node, ast.Attribute) and node.attr in MUTATORS and not own:  # (a class's own method)
                callers.append(f"{path.relative_to(src)}:{node.lineno} {node.attr}")
    assert callers == []
