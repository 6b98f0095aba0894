"""Invariants of the cluster state that must never break, whatever happens in whatever order:

- no device is ever oversubscribed in compute, memory or container count;
- release restores exactly what reserve took;
- a state rebuilt from the allocations (the annotations) equals the live one.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from devshare.engine.caches import EngineCaches
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import PodEvaluation, Scheduler
from devshare.engine.state import ClusterState, Conflict
from devshare.model import names
from devshare.model.codecs import decode_allocation, encode_annotations
from devshare.model.request import DeviceRequest
from support.cluster import GiB, add_node, pod

ask = st.one_of(
    st.builds(
        lambda c, m, n: DeviceRequest(type="gpu", count=n, core_milli=c, memory=m),
        st.sampled_from([0, 100, 250, 300, 500, 700]),
        st.sampled_from([0, GiB, 3 * GiB, 6 * GiB]),
        st.integers(1, 2),
    ),
    st.builds(
        lambda n: DeviceRequest(type="gpu", count=n, core_milli=1000, memory_ratio_milli=1000), st.integers(1, 2)
    ),
    st.builds(lambda r: DeviceRequest(type="gpu", core_milli=r, memory_ratio_milli=r), st.sampled_from([100, 500])),
    st.builds(lambda s: DeviceRequest(type="rdma", core_milli=s), st.sampled_from([250, 500, 1000])),
)
containers = st.lists(st.lists(ask, min_size=0, max_size=1), min_size=1, max_size=3)


PROBES = [
    pod("probe-share", DeviceRequest(type="gpu", core_milli=300, memory=GiB)),
    pod("probe-whole", DeviceRequest(type="gpu", count=2, core_milli=1000, memory_ratio_milli=1000)),
    pod("probe-mem", DeviceRequest(type="gpu", memory=2 * GiB)),
]


class StateMachine(RuleBasedStateMachine):
    @initialize(max_containers=st.integers(1, 4))
    def setup(self, max_containers: int) -> None:
        self.state = ClusterState(max_containers_per_device=max_containers)
        self.lifecycle = Lifecycle(Scheduler(self.state))
        labels = {names.MULTI_GPU_SHARE: "true", names.COMPUTE_POLICY: names.MULTI_SHARE_POLICY}
        add_node(self.state, "a", [8 * GiB, 16 * GiB], labels=labels, rdma=1)
        add_node(self.state, "b", 3, labels=labels, unhealthy=[2])
        self.now = 0.0
        self.n = 0

    def _snapshot(self) -> tuple[object, ...]:
        return self.state.usage_key()

    @rule(asks=containers, ttl=st.sampled_from([1.0, 5.0, None]))
    def schedule(self, asks: list[list[DeviceRequest]], ttl: float | None) -> None:
        self.n += 1
        p = pod(f"p{self.n}", *asks)
        placed = Scheduler(self.state).place(p)
        if placed is None:
            return
        before = self._snapshot()
        self.lifecycle.assume(p, placed.allocation, now=self.now, ttl=math.inf if ttl is None else ttl)
        if self.n % 5 == 0:  # sometimes undo at once: must restore exactly
            assert self.lifecycle.forget(p.key)
            assert self._snapshot() == before

    @rule(data=st.data())
    def reserve_anything(self, data: st.DataObject) -> None:
        """Any allocation, fitting or not, is either refused whole or keeps every device in bounds."""
        keys = list(self.state.pods)
        if not keys:
            return
        rec = self.state.pods[data.draw(st.sampled_from(keys))]
        self.n += 1
        clone = pod(f"clone{self.n}", *[list(c.devices) for c in rec.pod.containers])
        before = self._snapshot()
        try:
            self.state.reserve(clone, rec.allocation, now=self.now)
        except Conflict:
            assert self._snapshot() == before

    @precondition(lambda self: bool(self.state.pods))
    @rule(data=st.data())
    def bind(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.state.pods)))
        rec = self.state.pods[key]
        assert self.lifecycle.confirm(rec.pod, rec.allocation) is None
        assert self.state.pods[key].phase == "bound" and self.state.pods[key].expires_at is None

    @precondition(lambda self: bool(self.state.pods))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.state.pods)))
        self.state.release(key)

    @rule(minor=st.integers(0, 1))
    def card_health_flips(self, minor: int) -> None:
        """A Device update: a GPU of node a goes unhealthy (or back), pods on it keep their grants."""
        nd = self.state.devices["a"]
        flipped = tuple(msgspec.structs.replace(d, health=not d.health)
                        if d.type == names.GPU and d.minor == minor else d for d in nd.devices)
        self.state.set_devices(msgspec.structs.replace(nd, devices=flipped))

    @rule(dt=st.floats(0.5, 3.0))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        for key in self.lifecycle.expire(self.now):
            assert key not in self.state.pods
        for rec in self.state.pods.values():
            assert rec.phase == "bound" or rec.expires_at is None or rec.expires_at > self.now

    @invariant()
    def never_oversubscribed(self) -> None:
        st_ = self.state
        for t in st_.tables.values():
            rows = st_.node_rows()
            assert (t.used_core[rows] <= t.total_core[rows]).all()
            assert (t.used_mem[rows] <= t.total_mem[rows]).all()
            assert (t.used_slots[rows] <= st_.max_containers).all()
            assert (t.used_core >= 0).all() and (t.used_mem >= 0).all() and (t.used_slots >= 0).all()

    @invariant()
    def arrays_kept_in_step_equal_their_definition(self) -> None:
        for t in self.state.tables.values():
            assert (t.free_core == t.total_core - t.used_core).all()
            assert (t.free_mem == t.total_mem - t.used_mem).all()
            assert (t.open_core == np.where(t.usable_mask, np.maximum(t.free_core, 0), 0)).all()

    @invariant()
    def rebuilt_from_annotations_equals_live(self) -> None:
        rebuilt = ClusterState(max_containers_per_device=self.state.max_containers)
        for info in self.state.nodes.values():
            rebuilt.upsert_node(info)
        for nd in self.state.devices.values():
            rebuilt.set_devices(nd)
        for rec in self.state.pods.values():
            # through the annotations, as after a restart: encode what a bind writes, decode it back
            annotations = encode_annotations(rec.pod, rec.allocation, now_ns=0)
            alloc = decode_allocation(annotations)
            assert alloc == rec.allocation
            reason = rebuilt.add_bound(rec.pod, alloc)
            # recorded whatever it says; the only conflict allowed: a card that went unhealthy under it
            assert reason is None or reason.endswith(": unhealthy"), reason
        assert rebuilt.usage_key() == self.state.usage_key()

    @invariant()
    def cached_answers_equal_fresh_ones(self) -> None:
        """Per-node answers kept between pods (score cache) equal answers computed afresh."""
        sch = Scheduler(self.state)
        rows = self.state.node_rows()
        for probe in PROBES:
            warm = sch.evaluate(probe, rows)
            saved = self.state.caches
            self.state.caches = EngineCaches(self.state)
            cold = sch.evaluate(probe, rows)
            self.state.caches = saved
            assert warm.codes.tolist() == cold.codes.tolist()
            assert np.allclose(warm.scores, cold.scores)
            for i in np.flatnonzero(cold.codes == 0).tolist():
                assert warm.allocation(self.state, i) == cold.allocation(self.state, i)

    @invariant()
    def kept_reasons_equal_fresh_ones(self) -> None:
        """The "why not" texts kept per node between pods (reason cache) equal texts written afresh,
        and every node lands in exactly one of passed / failed / unresolvable."""
        sch = Scheduler(self.state)
        rows = self.state.node_rows()
        for probe in PROBES:
            v = sch.verdicts(probe, rows)
            ev = v.evaluation
            assert sorted([*v.passed.tolist(), *v.failed.tolist(), *v.unresolvable.tolist()]) == list(range(len(rows)))
            assert v.failed_reasons == [ev.reason(i) for i in v.failed.tolist()]
            assert v.unresolvable_reasons == [ev.reason(i) for i in v.unresolvable.tolist()]
            assert all(v.failed_reasons) and all(v.unresolvable_reasons)

    @invariant()
    def earlier_evaluation_used_only_where_nothing_changed(self) -> None:
        """Allocating with an earlier evaluation of the pod (the filter's, at bind) gives what a fresh
        evaluation gives on every node, whatever changed in between."""
        sch = Scheduler(self.state)
        kept: dict[str, PodEvaluation] = getattr(self, "kept", {})
        for probe in PROBES:
            earlier = kept.get(probe.name)
            if earlier is not None:
                for node in sorted(self.state.nodes):
                    assert sch.allocate_on(probe, node, evaluated=earlier) == sch.allocate_on(probe, node)
            kept[probe.name] = sch.evaluate(probe, self.state.node_rows())
        self.kept = kept

    @invariant()
    def unhealthy_device_unused(self) -> None:
        t = self.state.tables["gpu"]
        row = self.state.row_of["b"]
        assert t.used_slots[row, 2] == 0


StateMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestStateMachine = StateMachine.TestCase


def test_release_of_unknown_pod_is_a_no_op() -> None:
    s = ClusterState()
    add_node(s, "a", 2)
    before = s.usage_key()
    assert s.release("ns/none") is None
    assert not Lifecycle(Scheduler(s)).forget("ns/none")
    assert s.usage_key() == before
    assert np.all(s.tables["gpu"].used_core == 0)
