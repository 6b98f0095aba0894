"""The scheduler on the seeds' own examples and the request shapes the issue lists."""

from __future__ import annotations

import numpy as np
import pytest

from devshare.engine.handlers import Code
from devshare.engine.handlers.base import Settings
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model import names
from devshare.model.request import DeviceRequest
from devshare.server.extender.scores import normalize
from support.cluster import GiB, MiB, add_node, bound, gpu, hold, outcome, pod, priorities, whole


def test_seed002_bind_picks_the_fitting_card_with_least_free_memory() -> None:
    # seed 002: free GPU0 12207, GPU1 8138, GPU2 4069, GPU3 16276 MiB; ask 8138 -> GPU1
    st = ClusterState()
    add_node(st, "n1", 4, memory=16276 * MiB)
    for minor, free in [(0, 12207), (1, 8138), (2, 4069)]:
        bound(st, f"pre{minor}", "n1", minor, memory=(16276 - free) * MiB)
    placed = Scheduler(st).place(pod("x", gpu(memory=8138 * MiB)))
    assert placed is not None
    assert placed.allocation.containers[0].devices[0].minor == 1


def test_seed002_filter_needs_one_card_with_enough_memory() -> None:
    # seed 002: three nodes of 2 x 16276 MiB; ask 8138. N1 has 4069 free in all; N2 has 4069 on each
    # card (8138 in total, on no single card); N3 has 8138 free on GPU0.
    st = ClusterState()
    for n in ("N1", "N2", "N3"):
        add_node(st, n, 2, memory=16276 * MiB)
    bound(st, "a", "N1", 0, memory=16276 * MiB)
    bound(st, "b", "N1", 1, memory=12207 * MiB)
    bound(st, "c", "N2", 0, memory=12207 * MiB)
    bound(st, "d", "N2", 1, memory=12207 * MiB)
    bound(st, "e", "N3", 1, memory=16276 * MiB)
    bound(st, "f", "N3", 0, memory=8138 * MiB)
    out = outcome(Scheduler(st), pod("x", gpu(memory=8138 * MiB)), ["N1", "N2", "N3"])
    assert out.passed == ["N3"]
    assert set(out.failed) == {"N1", "N2"}
    assert "gpu 0: 4.0 GiB free, 7.9 GiB asked" in out.failed["N2"]


def test_reason_names_the_card_free_and_asked() -> None:
    st = ClusterState()
    add_node(st, "n1", 4, memory=8 * GiB)
    for m in range(4):
        bound(st, f"p{m}", "n1", m, memory=6 * GiB)
    out = outcome(Scheduler(st), pod("x", gpu(30, 6 * GiB)))
    assert "gpu 3: 2 GiB free, 6 GiB asked" in out.failed["n1"]


def test_seed000_2_1_3_on_a_four_card_node() -> None:
    # container 0 on two cards at 50%, container 1 one whole card, container 2 on three cards at 33%
    st = ClusterState()
    labels = {names.MULTI_GPU_SHARE: "true", names.COMPUTE_POLICY: "native-burst-share"}
    add_node(st, "n1", 4, memory=16 * GiB, labels=labels)
    p = pod("p", gpu(50, 2 * GiB, count=2), whole(1), gpu(33, 1 * GiB, count=3), dialect="mgpu")
    placed = Scheduler(st).place(p)
    assert placed is not None
    a = placed.allocation
    c0, c1, c2 = (sorted(g.minor for g in c.devices) for c in a.containers)
    assert len(c0) == 2 and len(c1) == 1 and len(c2) == 3
    assert c1[0] not in c0 and c1[0] not in c2  # the whole card is nobody else's
    assert set(c0) <= set(c2)  # binpack: the 50% shares sit on cards the 33% shares already use
    assert st.why_not(p, a) is None
    # a node without the multi-share label refuses, as unresolvable, saying which label enables it
    add_node(st, "plain", 4)
    out = outcome(Scheduler(st), p, ["plain"])
    assert names.MULTI_GPU_SHARE in out.unresolvable["plain"]


def test_several_containers_share_one_card_and_respect_the_container_limit() -> None:
    st = ClusterState(max_containers_per_device=3)
    add_node(st, "n1", 1, memory=16 * GiB)
    ok = pod("p", gpu(10, GiB), gpu(10, GiB), gpu(10, GiB))
    assert Scheduler(st).place(ok) is not None
    too_many = pod("q", gpu(10, GiB), gpu(10, GiB), gpu(10, GiB), gpu(10, GiB))
    assert Scheduler(st).place(too_many) is None


def test_mixed_gpu_and_rdma() -> None:
    st = ClusterState()
    add_node(st, "n1", 2, rdma=1)
    add_node(st, "n2", 2)
    p = pod("p", [gpu(50, GiB), DeviceRequest(type="rdma", core_milli=500)])
    placed = Scheduler(st).place(p)
    assert placed is not None and placed.node == "n1"
    types = sorted(g.type for g in placed.allocation.containers[0].devices)
    assert types == ["gpu", "rdma"]


def test_unhealthy_devices_are_never_used() -> None:
    st = ClusterState()
    add_node(st, "n1", 2, unhealthy=[0, 1])
    add_node(st, "n2", 2, unhealthy=[1])
    sch = Scheduler(st)
    for i in range(4):
        placed = sch.place(pod(f"p{i}", gpu(40, GiB)))
        if placed is None:
            break
        g = placed.allocation.containers[0].devices[0]
        assert (placed.node, g.minor) == ("n2", 0)
        hold(st, pod(f"p{i}", gpu(40, GiB)), placed.allocation, ttl=60)
    out = outcome(sch, pod("z", gpu(40, GiB)))
    assert "gpu 0: unhealthy" in out.failed.get("n1", out.unresolvable.get("n1", ""))


def test_card_binpack_and_spread() -> None:
    st = ClusterState()
    add_node(st, "n1", 4)
    bound(st, "a", "n1", 2, core=500, memory=8 * GiB)
    p = pod("p", gpu(20, 2 * GiB))
    packed = Scheduler(st).place(p)
    spread = Scheduler(st, settings=Settings(card_binpack=False)).place(p)
    assert packed is not None and spread is not None
    assert packed.allocation.containers[0].devices[0].minor == 2
    assert spread.allocation.containers[0].devices[0].minor != 2


def test_node_binpack_and_spread_and_scores_in_range() -> None:
    st = ClusterState()
    add_node(st, "busy", 4)
    add_node(st, "idle", 4)
    bound(st, "a", "busy", 0, core=1000, memory=16 * GiB)
    p = pod("p", gpu(20, 2 * GiB))
    pri = priorities(Scheduler(st), p)
    assert pri["busy"] > pri["idle"]
    pri_spread = priorities(Scheduler(st, settings=Settings(node_binpack=False, card_binpack=False)), p)
    assert pri_spread["idle"] > pri_spread["busy"]
    assert all(0 <= v <= 10 for v in pri.values())


def test_normalize_range() -> None:
    s = np.array([0.2, 0.5, 0.8, 9.0])
    ok = np.array([True, True, True, False])
    assert normalize(s, ok).tolist() == [0, 5, 10, 0]
    assert normalize(np.array([0.3, 0.3]), np.array([True, True])).tolist() == [10, 10]


def test_whole_cards_are_exclusive() -> None:
    st = ClusterState()
    add_node(st, "n1", 2)
    bound(st, "a", "n1", 0, core=100, memory=GiB)
    placed = Scheduler(st).place(pod("p", whole(1)))
    assert placed is not None and placed.allocation.containers[0].devices[0].minor == 1
    assert Scheduler(st).place(pod("q", whole(2))) is None
    out = outcome(Scheduler(st), pod("q", whole(2)))
    assert out.failed["n1"].startswith("needs 2 whole gpu")


def test_memory_ratio_becomes_bytes_of_that_card() -> None:
    st = ClusterState()
    add_node(st, "n1", [8 * GiB, 32 * GiB])
    bound(st, "a", "n1", 0, core=100, memory=GiB)  # binpack would prefer card 0
    placed = Scheduler(st).place(pod("p", gpu(50, ratio_pct=50)))
    assert placed is not None
    g = placed.allocation.containers[0].devices[0]
    total = 8 * GiB if g.minor == 0 else 32 * GiB
    assert g.memory == total // 2 and g.memory_ratio_milli == 500


def test_sixteen_containers_on_sixteen_cards_fit_within_the_search_budget() -> None:
    """The DFS is bounded by its budget (Settings.dfs_budget), not by time: how long it takes is
    bench/bench_engine.py's business."""
    st = ClusterState()
    labels = {names.MULTI_GPU_SHARE: "true", names.COMPUTE_POLICY: "native-burst-share"}
    add_node(st, "n1", 16, labels=labels)
    for m in range(0, 16, 2):
        bound(st, f"b{m}", "n1", m, core=300, memory=4 * GiB)
    asks = [gpu(25 + 5 * (i % 3), GiB, count=1 + (i % 2)) for i in range(16)]
    p = pod("p", *asks)
    placed = Scheduler(st).place(p)
    assert placed is not None
    assert st.why_not(p, placed.allocation) is None


def test_a_failing_handler_gives_seed_004_error_not_an_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    from devshare.engine.handlers import HANDLERS

    st = ClusterState()
    add_node(st, "n1", 2)

    def boom(ctx: object, rows: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(HANDLERS["gpu"], "evaluate", boom)
    sch = Scheduler(st)
    p = pod("p", gpu(30, GiB))
    ev = sch.evaluate(p, st.node_rows())
    assert ev.codes.tolist() == [Code.ERROR]
    assert outcome(sch, p).failed == {"n1": "internal error in the gpu handler: RuntimeError: boom"}
    assert sch.place(p) is None
