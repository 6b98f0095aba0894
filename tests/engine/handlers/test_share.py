"""The shared-device algorithm every handler runs (engine/handlers/share.py): the codes and the reasons a
person can act on, the grants of one container and of several, and the helpers it keeps per node."""

from __future__ import annotations

import numpy as np

from devshare.engine.handlers.base import (
    SUCCESS,
    UNRESOLVABLE,
    UNSCHEDULABLE,
    Context,
    Evaluation,
    Settings,
)
from devshare.engine.handlers.share import ShareHandler, describe_ask, describe_cards, large_enough, stale_elsewhere
from devshare.engine.policies.base import Policy
from devshare.engine.policies.binpack import BinpackPolicy
from devshare.engine.state import ClusterState
from devshare.model.request import DeviceRequest, PodRequest
from support.cluster import GiB, add_node, bound, gpu, pod, whole


class Shares(ShareHandler):
    """The algorithm alone: no rules of a device type, the context's policy."""

    def policy_for(self, ctx: Context, req: DeviceRequest) -> Policy:
        policy: Policy = ctx.policy
        return policy


def evaluate(state: ClusterState, p: PodRequest, device_type: str = "gpu") -> Evaluation:
    ctx = Context(state, p, Settings(), BinpackPolicy())
    return Shares(device_type).evaluate(ctx, state.node_rows())


def reasons(state: ClusterState, ev: Evaluation) -> dict[str, str]:
    return {state.name_of[int(r)]: ev.reason(i) for i, r in enumerate(ev.rows) if ev.codes[i] != SUCCESS}


def test_describe_ask_says_the_ask_as_a_person_would() -> None:
    assert describe_ask("gpu", whole()) == "a whole gpu"
    assert describe_ask("gpu", whole(4)) == "4 whole gpu"
    assert describe_ask("gpu", gpu(30, 4 * GiB)) == "one gpu with 30% compute and 4 GiB"
    assert describe_ask("gpu", gpu(50, ratio_pct=25, count=2)) == "2 gpu with 50% compute and 25% of memory each"
    assert describe_ask("gpu", gpu(0, 512 * 2**20)) == "one gpu with 512 MiB"
    assert describe_ask("rdma", DeviceRequest(type="rdma", core_milli=0)) == "one rdma with a share"


def test_a_type_no_device_object_lists_is_unresolvable_and_a_pod_not_asking_passes() -> None:
    state = ClusterState()
    add_node(state, "n0", 2)
    ev = evaluate(state, pod("p", DeviceRequest(type="fpga", core_milli=500)), "fpga")
    assert ev.codes.tolist() == [UNRESOLVABLE]
    assert ev.reason(0) == "node has no fpga devices (no Device object lists any)"
    ev = evaluate(state, pod("p", gpu(30)), "fpga")
    assert ev.codes.tolist() == [SUCCESS] and ev.grant(0) == {}


def test_too_few_devices_is_unresolvable_and_says_how_many() -> None:
    state = ClusterState()
    add_node(state, "two", 2)
    add_node(state, "none", 0)
    ev = evaluate(state, pod("p", whole(4)))
    assert ev.codes.tolist() == [UNRESOLVABLE, UNRESOLVABLE]
    assert reasons(state, ev) == {"two": "node has 2 gpu device(s), a container asks for 4",
                                  "none": "node has no gpu devices"}


def test_devices_too_small_or_unhealthy_are_unresolvable_and_named() -> None:
    state = ClusterState()
    add_node(state, "n0", [8 * GiB, 32 * GiB], unhealthy=[1])
    ev = evaluate(state, pod("p", gpu(30, 16 * GiB)))
    assert ev.codes.tolist() == [UNRESOLVABLE]
    assert ev.reason(0) == ("needs one gpu with 30% compute and 16 GiB; only 0 of its 2 gpu device(s) are "
                            "healthy and that large (gpu 0: 8 GiB and 100% compute in all, too small; "
                            "gpu 1: unhealthy)")


def test_busy_devices_are_unschedulable_and_each_says_what_is_free() -> None:
    state = ClusterState()
    add_node(state, "n0", 2, memory=16 * GiB)
    bound(state, "a", "n0", 0, core=800)
    bound(state, "b", "n0", 1, core=100, memory=14 * GiB)
    ev = evaluate(state, pod("p", gpu(30, 4 * GiB)))
    assert ev.codes.tolist() == [UNSCHEDULABLE]
    assert ev.reason(0) == ("needs one gpu with 30% compute and 4 GiB; gpu 0: 20% compute free, 30% asked; "
                            "gpu 1: 2 GiB free, 4 GiB asked")


def test_a_passing_node_gets_grants_and_columns_of_the_policy_s_choice() -> None:
    state = ClusterState()
    add_node(state, "n0", 4)
    bound(state, "a", "n0", 2, core=500)
    ev = evaluate(state, pod("p", gpu(30, 2 * GiB)))
    assert ev.codes.tolist() == [SUCCESS] and 0.0 < ev.scores[0] <= 1.0
    assert ev.columns is not None and ev.columns.tolist() == [[2]]  # binpack: the used card
    ((grant,),) = ev.grant(0).values()
    assert (grant.minor, grant.core_milli, grant.memory) == (2, 300, 2 * GiB)


def test_several_containers_get_a_combination_or_a_reason_naming_each_ask() -> None:
    state = ClusterState(max_containers_per_device=4)
    add_node(state, "roomy", 2, memory=16 * GiB)
    add_node(state, "tight", 2, memory=16 * GiB)
    bound(state, "a", "tight", 0, core=700)
    bound(state, "b", "tight", 1, core=700)
    ev = evaluate(state, pod("p", gpu(60, GiB), gpu(60, GiB)))
    assert ev.codes.tolist() == [SUCCESS, UNSCHEDULABLE]
    assert ev.reason(1) == ("no combination of gpu devices fits every container "
                            "(c0: one gpu with 60% compute and 1 GiB, c1: one gpu with 60% compute and 1 GiB)")
    grants = ev.grant(0)
    assert sorted(grants) == [0, 1]
    assert sorted(g.minor for gs in grants.values() for g in gs) == [0, 1]  # 60% + 60% cannot share a card


def test_answer_key_only_for_one_asking_container_and_per_policy() -> None:
    policy, state = BinpackPolicy(), ClusterState()

    def key(p: PodRequest, pol: Policy = policy) -> object:
        return Shares("gpu").answer_key(Context(state, p, Settings(), pol))

    assert key(pod("a", gpu(30))) == key(pod("b", gpu(30))) is not None  # same shape, same policy: one answer
    assert key(pod("a", gpu(30))) != key(pod("a", gpu(40)))
    assert key(pod("a", gpu(30))) != key(pod("a", gpu(30)), BinpackPolicy())  # another policy's answers differ
    assert key(pod("p", gpu(30), gpu(30))) is None  # several containers: never kept


def test_describe_cards_skips_cards_that_fit_and_says_when_none_is_usable() -> None:
    state = ClusterState()
    add_node(state, "n0", 3, memory=8 * GiB, unhealthy=[2])
    bound(state, "a", "n0", 0, memory=6 * GiB)
    t, row = state.table("gpu"), state.row_of["n0"]
    assert describe_cards(t, row, gpu(10, 4 * GiB), 4) == "gpu 0: 2 GiB free, 4 GiB asked; gpu 2: unhealthy"
    allowed = np.ones_like(t.present)
    allowed[row, 1] = False
    got = describe_cards(t, row, gpu(10, 4 * GiB), 4, allowed)
    assert "gpu 1: left out by the pod's GPU selection" in got
    add_node(state, "empty", 0)
    assert describe_cards(t, state.row_of["empty"], gpu(10), 4) == "no usable device"


def test_large_enough_counts_usable_devices_big_enough_in_all() -> None:
    state = ClusterState()
    add_node(state, "n0", [8 * GiB, 16 * GiB, 32 * GiB], unhealthy=[2])
    add_node(state, "n1", [32 * GiB, 32 * GiB])
    bound(state, "a", "n1", 0, core=1000, memory=32 * GiB)  # in use does not matter: big enough in all
    t = state.table("gpu")
    rows = state.node_rows()
    assert large_enough(t, gpu(10, 12 * GiB))[rows].tolist() == [1, 2]
    assert large_enough(t, gpu(10))[rows].tolist() == [2, 2]
    assert large_enough(t, gpu(10, ratio_pct=50))[rows].tolist() == [2, 2]
    allowed = np.ones_like(t.present)
    allowed[state.row_of["n1"], 1] = False
    assert large_enough(t, gpu(10, 12 * GiB), allowed)[rows].tolist() == [1, 1]


def test_stale_elsewhere_is_the_changed_kept_rows_not_being_scored() -> None:
    state = ClusterState()
    for n in ("n0", "n1", "n2", "n3"):
        add_node(state, n, 1)
    kept = state.row_version.copy()
    kept[state.row_of["n3"]] = -1  # never kept: not stale, just unknown
    for n in ("n0", "n1", "n3"):
        bound(state, f"p{n}", n, 0, core=100)
    got = stale_elsewhere(state, kept, np.array([state.row_of["n1"]]))
    assert got.tolist() == [state.row_of["n0"]]
