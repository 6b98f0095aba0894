"""No sequence of events leaves a partly bound gang, a double-booked GPU, or a leaked reservation.

Events: members ask (filter) and bind (claim), bindings fail, nodes go away and come back, GPUs
turn unhealthy, other pods take and free GPUs, time passes (plans and reservations expire)."""

from __future__ import annotations

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from devshare.engine.groups import PLAN, Bind, GroupPlanner, Refuse, Wait
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.request import GroupRef, PodRequest
from support.cluster import add_node, hold, occupy, pod, usage_key, whole

NODES = ("n0", "n1", "n2")
GPUS = 4
MATRIX = [[700, 50, 10, 10], [50, 700, 10, 10], [10, 10, 700, 50], [10, 10, 50, 700]]
TTL = 50.0


def rebuilt(state: ClusterState, *, bound_only: bool) -> tuple[object, ...]:
    """The usage a fresh state would have with the same nodes and the live (or only bound) pods."""
    fresh = ClusterState()
    for name in state.row_of:
        fresh.upsert_node(state.nodes[name])
        fresh.set_devices(state.devices[name])
    for rec in state.pods.values():
        if rec.phase == "bound" or not bound_only:
            occupy(fresh, rec.pod, rec.allocation)
    return usage_key(fresh)


class GangMachine(RuleBasedStateMachine):
    @initialize(replicas=st.integers(2, 4), quorum=st.integers(1, 4), per=st.integers(1, 3),
                plain_per=st.integers(1, 2))
    def setup(self, replicas: int, quorum: int, per: int, plain_per: int) -> None:
        self.state = ClusterState()
        for n in NODES:
            add_node(self.state, n, GPUS, bandwidth=MATRIX)
        self.planner = GroupPlanner(Scheduler(self.state), ttl=TTL)
        self.now = 0.0
        self.quorum = min(quorum, replicas)
        gang = GroupRef(name="gang", replicas=replicas, gang_name="gang", min_available=self.quorum)
        plain = GroupRef(name="plain", replicas=2)
        self.members: list[PodRequest] = [pod(f"gang-{i}", whole(per), group=gang) for i in range(replicas)]
        self.members += [pod(f"plain-{i}", whole(plain_per), group=plain) for i in range(2)]
        self.others = 0
        self.unhealthy: dict[str, set[int]] = {n: set() for n in NODES}

    def member(self, i: int) -> PodRequest:
        return self.members[i % len(self.members)]

    # ---------------------------------------------------------------- events
    @rule(i=st.integers(0, 5), restrict=st.booleans())
    def member_asks(self, i: int, restrict: bool) -> None:
        nodes = [n for n in NODES if n in self.state.row_of] if restrict else None
        self.planner.filter(self.member(i), nodes, now=self.now)

    @rule(i=st.integers(0, 5), node=st.sampled_from((None, None, None, *NODES)))
    def member_binds(self, i: int, node: str | None) -> None:
        p = self.member(i)
        d = self.planner.claim(p, node, now=self.now)
        assert isinstance(d, Bind | Wait | Refuse)
        event(f"bind -> {type(d).__name__}" + (f" x{len(d.members)}" if isinstance(d, Bind) else ""))
        if isinstance(d, Bind):
            assert d.members[0].pod == p.key
            for m in d.members:
                rec = self.state.pods[m.pod]
                assert rec.phase == "bound" and rec.allocation == m.allocation
                assert set(m.allocated_gpus.get(0, [])) <= set(m.visible_gpus)

    @rule(i=st.integers(0, 5))
    def binding_fails(self, i: int) -> None:
        self.planner.bind_failed(self.member(i).key, now=self.now)

    @rule(node=st.sampled_from(NODES))
    def node_deleted(self, node: str) -> None:
        self.state.remove_node(node)

    @rule(node=st.sampled_from(NODES))
    def node_comes_back(self, node: str) -> None:
        if node not in self.state.row_of:
            add_node(self.state, node, GPUS, bandwidth=MATRIX, unhealthy=sorted(self.unhealthy[node]))

    @rule(node=st.sampled_from(NODES), minor=st.integers(0, GPUS - 1))
    def gpu_turns_unhealthy(self, node: str, minor: int) -> None:
        if node in self.state.row_of:
            self.unhealthy[node].add(minor)
            add_node(self.state, node, GPUS, bandwidth=MATRIX, unhealthy=sorted(self.unhealthy[node]))

    @rule(count=st.integers(1, 4))
    def other_pod_takes_gpus(self, count: int) -> None:
        self.others += 1
        p = pod(f"other-{self.others}", whole(count))
        placed = self.planner.scheduler.place(p)
        if placed is not None:
            self.planner.lifecycle.assume(p, placed.allocation, now=self.now)
            self.planner.lifecycle.confirm(p, placed.allocation)

    @rule(k=st.integers(0, 20))
    def other_pod_leaves(self, k: int) -> None:
        self.planner.lifecycle.release(f"default/other-{k}")

    @rule(dt=st.sampled_from((1.0, 10.0, 30.0, 60.0)))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self.planner.expire(self.now)
        self.planner.lifecycle.expire(self.now)

    @rule()
    def everything_expires(self) -> None:
        self.now += TTL + 1000
        self.planner.expire(self.now)
        self.planner.lifecycle.expire(self.now)
        assert not self.planner.plans
        assert all(r.phase == "bound" for r in self.state.pods.values())
        assert usage_key(self.state) == rebuilt(self.state, bound_only=True)

    # ---------------------------------------------------------------- invariants
    @invariant()
    def gang_is_never_partly_bound(self) -> None:
        bound = self.planner.bound_members("default", "gang")
        assert len(bound) == 0 or len(bound) >= self.quorum, bound

    @invariant()
    def no_gpu_is_shared(self) -> None:
        t = self.state.tables.get("gpu")
        if t is None:
            return
        assert (t.used_slots <= 1).all()
        assert (t.used_core <= t.total_core).all()

    @invariant()
    def every_reservation_belongs_to_a_live_plan(self) -> None:
        held: dict[str, object] = {}
        for plan in self.planner.plans.values():
            for s in plan.slots:
                if s.held is not None:
                    held[s.held] = s.allocation
                    rec = self.state.pods.get(s.held)
                    # the slot's phase is the record's: a planned slot is held by the plan's hold record
                    if self.planner.phase(s) == "planned":
                        assert rec is not None and rec.group == plan.key, s
                    if self.planner.phase(s) == "bound":
                        assert rec is not None and rec.phase == "bound" and rec.group is None, s
        for key, rec in self.state.pods.items():
            # a hold is a record that says so, and only a plan's placeholder is one
            assert (rec.group is not None) == (PLAN in key), key
            if rec.group is not None or rec.phase == "assumed":
                assert held.get(key) == rec.allocation, key

    @invariant()
    def usage_matches_the_records(self) -> None:
        assert usage_key(self.state) == rebuilt(self.state, bound_only=False)

    @invariant()
    def members_hold_their_requests(self) -> None:
        for rec in self.state.pods.values():
            if rec.pod.group is not None:
                asked = sum(d.count for c in rec.pod.containers for d in c.devices)
                assert len(rec.allocation.grants()) == asked
                assert len({g.minor for _, g in rec.allocation.grants()}) == asked

    def teardown(self) -> None:
        if hasattr(self, "planner"):
            self.everything_expires()


GangMachine.TestCase.settings = settings(max_examples=120, stateful_step_count=40, deadline=None)
test_gang_state_machine = GangMachine.TestCase


def test_rebuilt_helper_detects_a_leak() -> None:
    s = ClusterState()
    add_node(s, "n0", GPUS)
    p = pod("x", whole(1))
    placed = Scheduler(s).place(p)
    assert placed is not None
    hold(s, p, placed.allocation)
    assert usage_key(s) != rebuilt(s, bound_only=True)
    assert usage_key(s) == rebuilt(s, bound_only=False)
