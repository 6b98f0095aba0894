"""Invariants of the cluster state that must never break, whatever happens in whatever order:

- no reservation ever oversubscribes a device in compute, memory or container count (a device that
  shrank, or a node that came back, under its pods may stay over-committed by the grants it had,
  and takes no more until they leave);
- release restores exactly what reserve took;
- a state rebuilt from the serialized objects (Node and Device objects as JSON, each pod's request
  and its allocation annotations as JSON), as after a restart, equals the live one;
- a reservation beyond a device's free memory, compute or container slots, or on an unhealthy
  device, is refused; one that fits exactly is taken.

Devices change under the pods at any time: they shrink, turn unhealthy and back, nodes go away and
come back. Targeted rules try every refusal on purpose at every step, so that a planted bug (say,
reserve no longer checking memory) is caught on every run, not when a random pod happens to hit it.
"""

from __future__ import annotations

import json
import math

import msgspec
import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from devshare.engine.admit import is_whole
from devshare.engine.caches import EngineCaches
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.records import Conflict
from devshare.engine.scheduler import PodEvaluation, Scheduler
from devshare.engine.state import ClusterState
from devshare.model import names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.annotations import encode_annotations
from devshare.model.codecs import decode_allocation
from devshare.model.device import device_object, parse_device
from devshare.model.node import parse_node
from devshare.model.request import DeviceRequest, PodRequest
from support.cluster import GiB, add_node, occupy, pod, records, usage_key

Device = tuple[str, str, int]  # (node, type, minor)

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
        add_node(self.state, "c", 2, labels=labels)
        self.labels = {n: dict(labels) for n in ("a", "b", "c")}  # the Node objects' labels
        self.removed: dict[str, object] = {}  # node name -> its NodeInfo while the node is gone
        # devices over-committed by a Device update under their pods: the usage they may keep
        self.ceiling: dict[Device, tuple[int, int, int]] = {}
        self.now = 0.0
        self.n = 0
        self.expected: set[str] = set()  # the pods that hold an allocation, as the rules made them

    def _snapshot(self) -> tuple[object, ...]:
        return usage_key(self.state)

    # ------------------------------------------------------------------ helpers
    def _devices(self, *, healthy: bool | None = None) -> list[tuple[Device, int, int]]:
        """(device, row, column) of every device of every node, sorted."""
        out = []
        for node in sorted(self.state.row_of):
            row = self.state.row_of[node]
            for dtype in sorted(self.state.tables):
                t = self.state.tables[dtype]
                for col in range(t.count(row)):
                    if healthy is None or bool(t.healthy[row, col]) == healthy:
                        out.append(((node, dtype, int(t.minor[row, col])), row, col))
        return out

    def _note_over_commitment(self) -> None:
        """After a Device update: devices now beyond their totals keep what they hold, no more."""
        for dev, row, col in self._devices():
            t = self.state.tables[dev[1]]
            used = (int(t.used_core[row, col]), int(t.used_mem[row, col]), int(t.used_slots[row, col]))
            if (used[0] > t.total_core[row, col] or used[1] > t.total_mem[row, col]
                    or used[2] > self.state.max_containers):
                prev = self.ceiling.get(dev)
                self.ceiling[dev] = used if prev is None else tuple(max(a, b) for a, b in zip(prev, used, strict=True))

    def _probe(self, device: Device, grants: list[tuple[int, int]]) -> tuple[PodRequest, PodAllocation]:
        """A pod with one container per grant (core milli, memory bytes), all on ``device``."""
        self.n += 1
        node, dtype, minor = device
        p = pod(f"probe{self.n}", *[[DeviceRequest(type=dtype, core_milli=c, memory=m)] for c, m in grants])
        alloc = PodAllocation(node=node, containers=tuple(
            ContainerAllocation(name=c.name, devices=(DeviceGrant(type=dtype, minor=minor, core_milli=core,
                                                                  memory=mem),))
            for c, (core, mem) in zip(p.containers, grants, strict=True)))
        return p, alloc

    def _must_refuse(self, p: PodRequest, alloc: PodAllocation, what: str) -> None:
        before = self._snapshot()
        try:
            self.lifecycle.assume(p, alloc, now=self.now)
        except Conflict:
            assert self._snapshot() == before
            return
        raise AssertionError(f"reserve took {what}: {alloc}")

    # ------------------------------------------------------------------ pods come and go
    @rule(asks=containers, ttl=st.sampled_from([1.0, 5.0, None]))
    def schedule(self, asks: list[list[DeviceRequest]], ttl: float | None) -> None:
        self.n += 1
        p = pod(f"p{self.n}", *asks)
        placed = Scheduler(self.state).place(p)
        if placed is None:
            return
        before = self._snapshot()
        self.lifecycle.assume(p, placed.allocation, now=self.now, ttl=math.inf if ttl is None else ttl)
        self.expected.add(p.key)
        if self.n % 5 == 0:  # sometimes undo at once: must restore exactly
            assert self.lifecycle.forget(p.key)
            self.expected.discard(p.key)
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
            self.lifecycle.assume(clone, rec.allocation, now=self.now)
            self.expected.add(clone.key)
        except Conflict:
            assert self._snapshot() == before

    @precondition(lambda self: bool(self.state.pods))
    @rule(data=st.data())
    def bind(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.state.pods)))
        rec = self.state.pods[key]
        self.lifecycle.confirm(rec.pod, rec.allocation)
        assert self.state.pods[key].phase == "bound" and self.state.pods[key].expires_at is None

    @precondition(lambda self: bool(self.state.pods))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.state.pods)))
        self.lifecycle.release(key)
        self.expected.discard(key)

    @rule(dt=st.floats(0.5, 3.0))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        for key in self.lifecycle.expire(self.now):
            assert key not in self.state.pods
            self.expected.discard(key)
        for rec in self.state.pods.values():
            assert rec.phase == "bound" or rec.expires_at is None or rec.expires_at > self.now

    # ------------------------------------------------------------------ targeted refusals
    @rule(data=st.data())
    def reserve_beyond_a_device(self, data: st.DataObject) -> None:
        """On a healthy device: one byte of memory, one milli of compute or one container beyond
        what is free is refused; exactly what is free is taken, and unreserving restores it."""
        devices = [d for d in self._devices(healthy=True) if d[0][1] == names.GPU or d[0][1] == "rdma"]
        if not devices:
            return
        dev, row, col = data.draw(st.sampled_from(devices))
        t = self.state.tables[dev[1]]
        free_core = int(t.total_core[row, col] - t.used_core[row, col])
        free_mem = int(t.total_mem[row, col] - t.used_mem[row, col])
        free_slots = self.state.max_containers - int(t.used_slots[row, col])
        if free_slots > 0 and free_mem >= 0:
            self._must_refuse(*self._probe(dev, [(0, free_mem + 1)]), f"{free_mem + 1} bytes of {free_mem} free")
        if free_slots > 0 and free_core >= 0:
            self._must_refuse(*self._probe(dev, [(free_core + 1, 0)]), f"{free_core + 1} milli of {free_core} free")
        if free_slots >= 0 and free_slots < 4:
            self._must_refuse(*self._probe(dev, [(0, 0)] * (free_slots + 1)), f"{free_slots + 1} containers")
        # (all the compute and no memory is a whole card: exclusive, so not beside other containers)
        whole = is_whole(free_core, 0, free_mem) and int(t.used_slots[row, col]) > 0
        if free_slots > 0 and free_core >= 0 and free_mem >= 0 and not whole:
            p, alloc = self._probe(dev, [(free_core, free_mem)])
            before = self._snapshot()
            self.lifecycle.assume(p, alloc, now=self.now)  # exactly what is free: must fit
            assert int(t.used_core[row, col]) == int(t.total_core[row, col])
            assert int(t.used_mem[row, col]) == int(t.total_mem[row, col])
            assert self.lifecycle.forget(p.key) and self._snapshot() == before

    @rule(data=st.data())
    def reserve_on_an_unhealthy_device(self, data: st.DataObject) -> None:
        devices = self._devices(healthy=False)
        if devices:
            dev, _, _ = data.draw(st.sampled_from(devices))
            self._must_refuse(*self._probe(dev, [(0, 0)]), f"a grant on unhealthy {dev}")

    # ------------------------------------------------------------------ devices change under the pods
    def _replace_device(self, node: str, dtype: str, minor: int, **change: object) -> None:
        nd = self.state.devices[node]
        devs = tuple(msgspec.structs.replace(d, **change) if d.type == dtype and d.minor == minor else d
                     for d in nd.devices)
        self.state.set_devices(msgspec.structs.replace(nd, devices=devs))
        self._note_over_commitment()

    @rule(data=st.data())
    def device_health_flips(self, data: st.DataObject) -> None:
        """A Device update: any device goes unhealthy (or back) mid-use; pods on it keep their grants."""
        devices = [d for d in self._devices() if d[0] != ("b", names.GPU, 2)]  # b's GPU 2: never healthy
        if devices:
            (node, dtype, minor), row, col = data.draw(st.sampled_from(devices))
            self._replace_device(node, dtype, minor, health=not bool(self.state.tables[dtype].healthy[row, col]))

    @rule(data=st.data(), memory=st.sampled_from([GiB, 4 * GiB, 8 * GiB, 16 * GiB]),
          core=st.sampled_from([500, 1000]))
    def device_resized(self, data: st.DataObject, memory: int, core: int) -> None:
        """A Device update: a GPU's memory or compute changes (shrinks below its pods, or grows)."""
        devices = [d for d in self._devices() if d[0][1] == names.GPU]
        if devices:
            (node, dtype, minor), _, _ = data.draw(st.sampled_from(devices))
            self._replace_device(node, dtype, minor, memory=memory, core_milli=core)

    @precondition(lambda self: len(self.state.row_of) > 1)
    @rule(data=st.data())
    def node_removed(self, data: st.DataObject) -> None:
        """A Node is deleted: its pods keep their records, nothing counts there any more."""
        name = data.draw(st.sampled_from(sorted(self.state.row_of)))
        self.removed[name] = self.state.nodes[name]
        self.state.remove_node(name)
        self.ceiling = {d: c for d, c in self.ceiling.items() if d[0] != name}
        assert name not in self.state.row_of

    @precondition(lambda self: bool(self.removed))
    @rule(data=st.data())
    def node_returns(self, data: st.DataObject) -> None:
        """The Node comes back (perhaps on another row): its pods count on it again."""
        name = data.draw(st.sampled_from(sorted(self.removed)))
        self.state.upsert_node(self.removed.pop(name))  # type: ignore[arg-type]
        self._note_over_commitment()

    # ------------------------------------------------------------------ invariants
    @invariant()
    def pods_kept_whatever_happens_to_their_node(self) -> None:
        """Only release, forget and expiry drop a pod's record: not a Device update, nor its node
        going away (its record comes back into use with the node)."""
        assert set(self.state.pods) == self.expected

    @invariant()
    def never_oversubscribed(self) -> None:
        st_ = self.state
        for t in st_.tables.values():
            assert (t.used_core >= 0).all() and (t.used_mem >= 0).all() and (t.used_slots >= 0).all()
        for dev, row, col in self._devices():
            t = st_.tables[dev[1]]
            used = (int(t.used_core[row, col]), int(t.used_mem[row, col]), int(t.used_slots[row, col]))
            within = (used[0] <= t.total_core[row, col] and used[1] <= t.total_mem[row, col]
                      and used[2] <= st_.max_containers)
            if within:
                self.ceiling.pop(dev, None)
                continue
            ceiling = self.ceiling.get(dev)
            assert ceiling is not None, f"{dev} oversubscribed: {used}, totals " \
                f"{int(t.total_core[row, col])}/{int(t.total_mem[row, col])}/{st_.max_containers}"
            assert all(u <= c for u, c in zip(used, ceiling, strict=True)), f"{dev} grew while over-committed"
            self.ceiling[dev] = tuple(min(u, c) for u, c in zip(used, ceiling, strict=True))

    @invariant()
    def arrays_kept_in_step_equal_their_definition(self) -> None:
        for t in self.state.tables.values():
            assert (t.free_core == t.total_core - t.used_core).all()
            assert (t.free_mem == t.total_mem - t.used_mem).all()
            assert (t.open_core == np.where(t.usable_mask, np.maximum(t.free_core, 0), 0)).all()

    @invariant()
    def inspect_from_the_copied_columns_says_what_the_tables_hold(self) -> None:
        """The inspect JSON, built from a copy of the state (view(): device columns, pods), says what the
        tables hold, read cell by cell, and who holds what, read from the pods' records."""
        st_ = self.state
        want = []
        for name in sorted(st_.row_of):
            row, devices = st_.row_of[name], []
            for t in sorted(st_.tables):
                tb = st_.tables[t]
                for col in range(tb.count(row)):
                    minor = int(tb.minor[row, col])
                    gpu = t == "gpu"
                    devices.append({
                        "type": t, "minor": minor, "id": tb.ids[row][col], "health": bool(tb.healthy[row, col]),
                        "heldOutside": bool(tb.blocked[row, col]),
                        "total": {"core": int(tb.total_core[row, col]) / 10,
                                  **({"memory": int(tb.total_mem[row, col])} if gpu else {})},
                        "used": {"core": int(tb.used_core[row, col]) / 10,
                                 **({"memory": int(tb.used_mem[row, col])} if gpu else {}),
                                 "containers": int(tb.used_slots[row, col])},
                        "pods": sorted({f"{key}/{rec.allocation.containers[ci].name}"
                                        for key, rec in st_.pods.items() for ci, g in rec.allocation.grants()
                                        if (rec.allocation.node, g.type, g.minor) == (name, t, minor)}),
                    })
            want.append({"name": name, "devices": devices})
        assert st_.inspect() == {"nodes": want}

    @invariant()
    def rebuilt_from_serialized_objects_equals_live(self) -> None:
        """As after a restart: Node and Device objects and each pod's request and allocation
        annotations go through JSON text, are parsed into fresh objects, and rebuild a state whose
        devices (totals, health) and usage equal the live one's."""
        live = self.state
        rebuilt = ClusterState(max_containers_per_device=live.max_containers)
        for name in sorted(live.nodes):
            node_json = json.dumps({"apiVersion": "v1", "kind": "Node",
                                    "metadata": {"name": name, "labels": self.labels[name]}})
            rebuilt.upsert_node(parse_node(json.loads(node_json)))
        for nd in live.devices.values():
            rebuilt.set_devices(parse_device(json.loads(json.dumps(device_object(nd)))))
        for rec in live.pods.values():
            annotations = json.loads(json.dumps(encode_annotations(rec.pod, rec.allocation, now_ns=0)))
            alloc = decode_allocation(annotations)
            request = msgspec.json.decode(msgspec.json.encode(rec.pod), type=PodRequest)
            reason = occupy(rebuilt, request, alloc)
            # recorded whatever it says; the conflicts allowed: a device that went unhealthy under its
            # pods, or one over-committed by a Device update
            if reason is not None:
                touched = {(alloc.node, g.type, g.minor) for _, g in alloc.grants()}
                assert reason.endswith(": unhealthy") or touched & set(self.ceiling), reason
        assert usage(rebuilt) == usage(live)
        assert device_key(rebuilt) == device_key(live)

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
        """b's GPU 2 was unhealthy from the start and never recovers: nothing ever lands on it."""
        row = self.state.row_of.get("b")
        if row is not None:
            t = self.state.tables["gpu"]
            assert t.used_slots[row, t.column_of(row, 2)] == 0


def usage(state: ClusterState) -> list[object]:
    """``usage_key`` without the entries of device types a node does not have (a state keeps a table
    for every type it has seen, on any node, even one since removed)."""
    return [k for k in usage_key(state) if not (len(k) == 5 and k[2] == [])]


def device_key(state: ClusterState) -> list[object]:
    """Every node's devices as the state holds them: totals, health, minors."""
    out: list[object] = []
    for name in sorted(state.row_of):
        row = state.row_of[name]
        for dtype in sorted(state.tables):
            t = state.tables[dtype]
            n = t.count(row)
            if n:
                out.append((name, dtype, t.minor[row, :n].tolist(), t.total_core[row, :n].tolist(),
                            t.total_mem[row, :n].tolist(), t.healthy[row, :n].tolist()))
    return out


StateMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=30, deadline=None)
TestStateMachine = StateMachine.TestCase


def test_release_of_unknown_pod_is_a_no_op() -> None:
    s = ClusterState()
    add_node(s, "a", 2)
    before = usage_key(s)
    assert Lifecycle(Scheduler(s)).release("ns/none") is None
    assert not Lifecycle(Scheduler(s)).forget("ns/none")
    assert usage_key(s) == before
    assert np.all(s.tables["gpu"].used_core == 0)


def test_pods_holding_no_record_count_on_their_node_cpu_and_memory() -> None:
    """Another scheduler's pods, pods asking no device: their CPU and memory are counted on the node
    (and in a scratch copy), replaced on a change, given back when they go, and never counted twice
    once the pod holds a record."""
    s = ClusterState()
    lc = records(s)
    s.upsert_node(parse_node({"metadata": {"name": "a"}, "status": {"allocatable": {"cpu": "8", "memory": "16Gi"}}},
                             track_resources=True))
    row = s.row_of["a"]
    v = int(s.row_version[row])
    lc.count_plain("ns/web", "a", 3000, 4 * GiB)
    assert (int(s.cpu_used[row]), int(s.mem_used[row])) == (3000, 4 * GiB)
    assert int(s.row_version[row]) > v  # the node's kept answers are stale
    assert bool(s.cpu_short(row, 6000)) and not bool(s.cpu_short(row, 5000))
    lc.count_plain("ns/web", "a", 1000, GiB)
    assert (int(s.cpu_used[row]), int(s.mem_used[row])) == (1000, GiB)
    copy = s.scratch(["a"])
    assert int(copy.cpu_used[copy.row_of["a"]]) == 1000
    lc.count_plain("ns/late", "b", 500, 0)  # its node is not known yet: counted when it comes
    s.upsert_node(parse_node({"metadata": {"name": "b"}, "status": {"allocatable": {"cpu": "8"}}},
                             track_resources=True))
    assert int(s.cpu_used[s.row_of["b"]]) == 500
    occupy(s, PodRequest(namespace="ns", name="web", cpu_milli=1000, memory_bytes=GiB),
           PodAllocation(node="a", containers=(ContainerAllocation(name="main", devices=()),)))
    assert "ns/web" not in s.plain and int(s.cpu_used[row]) == 1000  # through its record only
    lc.release("ns/web")
    lc.uncount_plain("ns/late")
    assert int(s.cpu_used[row]) == 0 and int(s.cpu_used[s.row_of["b"]]) == 0
