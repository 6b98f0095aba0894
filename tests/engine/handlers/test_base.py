"""The device-type interface (engine/handlers/base.py): seed 004's codes, the grant of one share on one
device, and what every handler inherits."""

from __future__ import annotations

import numpy as np
import pytest

from devshare.engine.handlers import base
from devshare.engine.handlers.base import Code, Context, DeviceHandler, Evaluation, Settings, grant_for
from devshare.engine.policies.binpack import BinpackPolicy
from devshare.engine.state import ClusterState
from devshare.model.allocation import DeviceGrant
from devshare.model.request import DeviceRequest
from support.cluster import GiB, add_node, gpu, pod, whole


def test_codes_are_seed_004_values() -> None:
    assert {c.name: int(c) for c in Code} == {"SUCCESS": 0, "ERROR": 1, "UNSCHEDULABLE": 2, "UNRESOLVABLE": 3}
    # the plain ints the code arrays are compared with are the same values
    assert (base.SUCCESS, base.ERROR, base.UNSCHEDULABLE, base.UNRESOLVABLE) == (0, 1, 2, 3)
    assert all(type(x) is int for x in (base.SUCCESS, base.ERROR, base.UNSCHEDULABLE, base.UNRESOLVABLE))


def state_with(memories: list[int]) -> ClusterState:
    state = ClusterState()
    add_node(state, "n0", memories)
    return state


def test_grant_of_a_whole_device_is_all_of_it() -> None:
    state = state_with([16 * GiB, 40 * GiB])
    t = state.table("gpu")
    row = state.row_of["n0"]
    assert grant_for(t, row, 1, whole()) == DeviceGrant(type="gpu", minor=1, id="GPU-n0-1", core_milli=1000,
                                                        memory=40 * GiB, memory_ratio_milli=1000)


def test_grant_of_a_share_in_bytes_says_its_ratio_of_that_card() -> None:
    state = state_with([16 * GiB, 40 * GiB])
    t, row = state.table("gpu"), state.row_of["n0"]
    g = grant_for(t, row, 0, gpu(30, 4 * GiB))
    assert (g.minor, g.id, g.core_milli, g.memory, g.memory_ratio_milli) == (0, "GPU-n0-0", 300, 4 * GiB, 250)


def test_grant_of_a_share_by_ratio_is_that_part_of_the_card_s_memory() -> None:
    state = state_with([16 * GiB, 40 * GiB])
    t, row = state.table("gpu"), state.row_of["n0"]
    a, b = (grant_for(t, row, col, gpu(50, ratio_pct=25)) for col in (0, 1))
    assert (a.memory, a.memory_ratio_milli) == (4 * GiB, 250)
    assert (b.memory, b.memory_ratio_milli) == (10 * GiB, 250)


def test_grant_on_a_device_without_memory_has_no_ratio() -> None:
    state = ClusterState()
    add_node(state, "n0", 0, rdma=2)
    t, row = state.table("rdma"), state.row_of["n0"]
    share = grant_for(t, row, 1, DeviceRequest(type="rdma", core_milli=400))
    assert (share.type, share.minor, share.id, share.core_milli, share.memory, share.memory_ratio_milli) == (
        "rdma", 1, "RDMA-n0-1", 400, 0, 0)
    full = grant_for(t, row, 0, DeviceRequest(type="rdma", core_milli=1000, memory_ratio_milli=1000))
    assert (full.core_milli, full.memory, full.memory_ratio_milli) == (1000, 0, 0)


def test_evaluation_reason_is_its_explanation_and_a_plain_handler_keeps_no_answer() -> None:
    ev = Evaluation(np.array([4, 7]), np.array([0, 2], np.int8), np.zeros(2), lambda i: f"row {i} is full",
                    lambda i: {})
    assert ev.reason(1) == "row 1 is full" and ev.columns is None

    class Nothing(DeviceHandler):
        type = "x"

        def evaluate(self, ctx: Context, rows: base.Ints) -> Evaluation:
            raise AssertionError("not called")

    ctx = Context(ClusterState(), pod("p", gpu(10)), Settings(), BinpackPolicy())
    assert Nothing().answer_key(ctx) is None
    with pytest.raises(NotImplementedError):
        Nothing().grants_of(ctx, np.zeros(0, np.int64), np.zeros((0, 1), np.int64))
