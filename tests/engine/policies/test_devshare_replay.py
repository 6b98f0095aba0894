"""devshare's own node policy: the remainder-waste table, online learning only, valid choices for any pod."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.policies import FGDPolicy, top_classes
from devshare.engine.policies.devshare import DevsharePolicy
from devshare.engine.policies.remainder import fgd_card_frag, waste_table
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model import names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.device import DeviceInfo, NodeDevices
from devshare.model.node import NodeInfo
from devshare.model.request import WHOLE, ContainerRequest, DeviceRequest, PodRequest
from devshare.sim.replay import build_state, pod_request
from devshare.sim.trace import Trace, TraceNode, TracePod
from support.cluster import hold

GIB = 1 << 30


def test_waste_table_ends() -> None:
    classes = {(0, 500, 1, ()): 1.0, (0, 300, 1, ()): 1.0, (0, 1000, 1, ()): 2.0, (4000, 0, 0, ()): 4.0}
    w = waste_table(classes, kappa=0.0)
    weight = 0.5  # the share and whole-card classes' probability among all classes
    assert w[WHOLE] == 0.0  # a free card goes to whole-card tasks
    assert np.allclose(w[:300], np.arange(300) * weight)  # nothing fits: all of it is wasted
    assert w[300] == 0.0  # kappa 0: the exact fit always comes
    assert np.isclose(w[400], 100 * weight)  # only 300 fits: 100 is left for good
    assert np.isclose(w[500], (200 + 0) / 2 * weight)  # 300 (then 200 left) or 500 (exact), equally likely
    assert np.isclose(w[800], (100 + 0) / 2 * weight)  # 300 (then W(500) = 100) or 500 (then exact)
    # with kappa the fit may never come: W between the always-filled value and r
    wk = waste_table(classes, kappa=0.05)
    assert (wk >= w - 1e-9).all() and (wk[:WHOLE] <= np.arange(WHOLE) * weight + 1e-9).all()


def test_waste_table_without_shares_wastes_every_partly_used_card() -> None:
    w = waste_table({(0, 1000, 2, ()): 1.0, (4000, 0, 0, ()): 1.0}, kappa=0.05)
    assert w[WHOLE] == 0.0 and np.allclose(w[:WHOLE], np.arange(WHOLE) * 0.5)


@given(st.dictionaries(st.tuples(st.sampled_from([0, 4000]), st.integers(0, 1000), st.integers(0, 2), st.just(())),
                       st.floats(0.1, 10.0), min_size=1, max_size=6),
       st.integers(0, WHOLE))
def test_fgd_card_frag_is_fgd_per_card_fragmentation(classes: dict, r: int) -> None:
    total = sum(classes.values())
    naive = 0.0
    for (_c, milli, count, _m), p in classes.items():
        if count == 1 and 0 < milli < WHOLE and milli > r:  # a share that does not fit the card
            naive += p / total * r
        if count >= 1 and milli >= WHOLE and r < WHOLE:  # whole cards: a partly used card is no use
            naive += p / total * r
    assert np.isclose(fgd_card_frag(classes)[r], naive)


def _trace_state() -> ClusterState:
    nodes = (TraceNode("a", 32000, 1 << 20, 2, "T4"), TraceNode("b", 96000, 1 << 20, 8, "G2"),
             TraceNode("c", 16000, 1 << 20, 4, "V100"))
    return build_state(Trace("t", nodes, ()))


def _choices(pol: DevsharePolicy, state: ClusterState, pods: list[PodRequest]) -> list[tuple[list[float], list]]:
    sched = Scheduler(state, policy=pol)
    out = []
    for p in pods:
        ev = sched.evaluate(p, state.node_rows())
        out.append((np.asarray(ev.scores).tolist(), np.asarray(ev.codes).tolist()))
    return out


SHAPES = [TracePod("x", 4000, 0, 1, 470), TracePod("y", 3000, 0, 1, 810), TracePod("z", 8000, 0, 1, 1000),
          TracePod("w", 2000, 0, 0, 0), TracePod("v", 4000, 0, 1, 320), TracePod("u", 16000, 0, 2, 1000)]


def test_choice_depends_only_on_pods_observed() -> None:
    seen = [pod_request(SHAPES[i % len(SHAPES)], f"s{i}") for i in range(30)]
    probes = [pod_request(s, f"probe-{s.name}") for s in SHAPES]
    state = _trace_state()
    a = DevsharePolicy()
    for p in seen:
        a.observe(p)
    first = _choices(a, state, probes)
    # other policies, fed other pods (a "future" it must not see), change nothing about a
    for _ in range(2):
        other = DevsharePolicy()
        for i in range(50):
            other.observe(pod_request(TracePod(f"o{i}", 1000, 0, 1, 50 + 10 * i), f"o{i}"))
        _choices(other, _trace_state(), probes)
    assert _choices(a, state, probes) == first
    # a fresh policy told the same pods scores the same: no hidden shared state
    b = DevsharePolicy()
    for p in seen:
        b.observe(p)
    assert _choices(b, state, probes) == first


def test_share_avoids_leaving_a_remainder_nothing_will_fill() -> None:
    # one node, cards free [530, 680] (470 and 320 taken); the mix: 650, 470, twice as many 320 shares, and
    # whole cards. A 320 share on card 0 leaves 210 (FGD's pick: only tasks of at most 210 fit it, none
    # come); on card 1 it leaves 360, which the next 320 fills to 40 (the 320s the 650s leave go three to
    # a card: the packing's prices make a 320 worth 1/3). devshare takes card 1.
    def state() -> ClusterState:
        st_ = build_state(Trace("t", (TraceNode("n0", 64000, 1 << 20, 2, "G2"),), ()))
        for k, (card, milli) in enumerate(((0, 470), (1, 320))):
            grant = DeviceGrant(type="gpu", minor=card, id=f"n0-gpu{card}", core_milli=milli)
            alloc = PodAllocation(node="n0", containers=(ContainerAllocation(name="main", devices=(grant,)),))
            hold(st_, pod_request(TracePod(f"u{k}", 0, 0, 1, milli)), alloc)
        return st_

    mix = [650, 470, 320, 320, 1000, 1000]
    pol = DevsharePolicy()
    counts: dict = {}
    for i in range(240):
        milli = mix[i % len(mix)]
        pol.observe(pod_request(TracePod(f"m{i}", 1000, 0, 1, milli), f"m{i}"))
        counts[(1000, milli, 1, ())] = counts.get((1000, milli, 1, ()), 0) + 1
    share = pod_request(TracePod("b", 1000, 0, 1, 320))
    ours = Scheduler(state(), policy=pol).place(share)
    fgd = Scheduler(state(), policy=FGDPolicy(top_classes(counts))).place(share)
    assert ours is not None and fgd is not None
    assert ours.allocation.containers[0].devices[0].minor == 1
    assert fgd.allocation.containers[0].devices[0].minor == 0


def _memory_state() -> ClusterState:
    state = ClusterState()
    for n, cards in (("m0", 2), ("m1", 4)):
        state.upsert_node(NodeInfo(name=n, labels={}, gpu_model="A100", cpu_milli=64000, memory_bytes=256 * GIB))
        devs = tuple(DeviceInfo(type=names.GPU, minor=i, id=f"{n}-{i}", core_milli=1000, memory=16 * GIB,
                                model="A100") for i in range(cards))
        state.set_devices(NodeDevices(node=n, devices=devs))
    return state


def _gpu_pod(name: str, containers: list[tuple[int, int, int]]) -> PodRequest:
    """containers: (count, core milli, memory GiB) of each container's GPU ask."""
    cs = tuple(ContainerRequest(name=f"c{i}", devices=(DeviceRequest(type=names.GPU, count=k, core_milli=c,
                                                                     memory=m * GIB),))
               for i, (k, c, m) in enumerate(containers))
    return PodRequest(namespace="ns", name=name, containers=cs, cpu_milli=1000, memory_bytes=GIB)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(1, 2), st.sampled_from([0, 100, 300, 600, 1000]),
                                   st.integers(0, 12)), min_size=1, max_size=2), min_size=1, max_size=25))
def test_memory_asks_and_several_containers_place_validly(pods: list) -> None:
    state = _memory_state()
    pol = DevsharePolicy()
    sched = Scheduler(state, policy=pol)
    t = state.table(names.GPU)
    for i, containers in enumerate(pods):
        req = _gpu_pod(f"p{i}", containers)
        pol.observe(req)
        where = sched.place(req)
        if where is None:
            continue
        hold(state, req, where.allocation)  # raises if it does not fit
        row = state.row_of[where.node]
        assert (t.used_core[row] <= t.total_core[row]).all()
        for c, (k, _core, _mem) in zip(where.allocation.containers, containers, strict=True):
            assert len(c.devices) == k
        pol.placed(req, row)


@settings(max_examples=15, deadline=None)
@given(cpu_per_gpu=st.sampled_from([500, 4000, 9000, 12000, 20000]), cpu_only=st.integers(0, 3))
def test_cpu_scarce_mode_follows_the_mix_against_the_cluster(cpu_per_gpu: int, cpu_only: int) -> None:
    """The policy's CPU pressure is the pods seen's CPU per GPU over the cluster's; from TIGHT it keeps
    98% of the classes, from SCARCE it switches to its CPU-scarce mode (FGD's 95% class coverage, no
    CPU-only packing); never before SCARCE_AFTER pods, and only from what it has seen."""
    from devshare.engine.policies.devshare import SCARCE, SCARCE_AFTER, SCARCE_COVERAGE, TIGHT, TIGHT_COVERAGE

    state = _trace_state()
    cluster = float(state.cpu_total[state.node_rows()].sum()) / float(
        state.tables["gpu"].total_core[state.node_rows()].sum())
    pol = DevsharePolicy()
    probe = pod_request(TracePod("probe", 1000, 0, 1, 500), "probe")
    pods = [TracePod(f"g{i}", cpu_per_gpu // 2, 0, 1, 500) for i in range(4)]
    pods += [TracePod(f"c{i}", 8000, 0, 0, 0) for i in range(cpu_only)]
    cpu = gpu = 0
    for i in range(SCARCE_AFTER + 1024):
        tp = pods[i % len(pods)]
        pol.observe(pod_request(tp, f"p{i}"))
        cpu += tp.cpu_milli
        gpu += tp.gpu_total
        if i == 0:
            _choices(pol, state, [probe])  # the policy learns the cluster's capacity from a state it sees
        if i + 1 < SCARCE_AFTER:
            assert not pol.cpu_scarce
    pressure = cpu / gpu / cluster
    assert abs(pol.pressure - pressure) < 1e-9
    assert pol.cpu_scarce == (pol.pressure >= SCARCE)
    assert pol.coverage_now == (SCARCE_COVERAGE if pol.pressure >= SCARCE else
                                TIGHT_COVERAGE if pol.pressure >= TIGHT else pol.coverage)
    assert (min(pol.distribution().values()) > 0) and len(pol.distribution()) >= 1
