"""RDMA, FPGA and any other device shared by percent of one device (engine/handlers/generic.py): card-level
binpack or spread on the share alone, none of the GPU's rules, and a handler for every unregistered type."""

from __future__ import annotations

from devshare.engine.handlers import HANDLERS, Handlers
from devshare.engine.handlers.base import SUCCESS, UNSCHEDULABLE, Context, Evaluation, Settings
from devshare.engine.handlers.generic import GenericHandler
from devshare.engine.policies.binpack import BinpackPolicy, binpack_for
from devshare.engine.state import ClusterState
from devshare.model import names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.request import DeviceRequest, PodRequest
from support.cluster import add_node, occupy, pod


def rdma(pct: int) -> DeviceRequest:
    return DeviceRequest(type="rdma", core_milli=pct * 10)


def occupied(state: ClusterState, node: str, minor: int, pct: int) -> None:
    grant = DeviceGrant(type="rdma", minor=minor, id=f"RDMA-{node}-{minor}", core_milli=pct * 10)
    occupy(state, pod(f"used-{node}-{minor}", rdma(pct)),
           PodAllocation(node=node, containers=(ContainerAllocation(name="c0", devices=(grant,)),)))


def evaluate(state: ClusterState, p: PodRequest, settings: Settings | None = None) -> Evaluation:
    ctx = Context(state, p, settings or Settings(), BinpackPolicy())
    return GenericHandler("rdma").evaluate(ctx, state.node_rows())


def test_the_share_alone_decides_binpack_or_spread() -> None:
    state = ClusterState()
    add_node(state, "n0", 0, rdma=3)
    occupied(state, "n0", 1, 40)
    packed = evaluate(state, pod("p", rdma(50)))
    spread = evaluate(state, pod("p", rdma(50)), Settings(card_binpack=False))
    assert packed.codes.tolist() == spread.codes.tolist() == [SUCCESS]
    (packed_grant,), = packed.grant(0).values()
    (spread_grant,), = spread.grant(0).values()
    assert (packed_grant.minor, packed_grant.core_milli, packed_grant.memory) == (1, 500, 0)
    assert spread_grant.minor == 0


def test_a_share_that_fits_nowhere_says_what_is_free() -> None:
    state = ClusterState()
    add_node(state, "n0", 0, rdma=1)
    occupied(state, "n0", 0, 50)
    ev = evaluate(state, pod("p", rdma(60)))
    assert ev.codes.tolist() == [UNSCHEDULABLE]
    assert ev.reason(0) == "needs one rdma with 60% compute; rdma 0: 50% compute free, 60% asked"


def test_the_gpu_s_rules_do_not_apply() -> None:
    state = ClusterState()
    add_node(state, "n0", 0, rdma=1, labels={names.NODE_GPU_MODEL: "T4"})
    ev = evaluate(state, pod("p", rdma(20), gpu_models=("A100",), compute_policy="fixed-share"))
    assert ev.codes.tolist() == [SUCCESS]


def test_the_policy_is_the_shared_binpack_on_compute_alone() -> None:
    settings = Settings(core_weight=0.2, card_binpack=False)
    ctx = Context(ClusterState(), pod("p", rdma(20)), settings, BinpackPolicy())
    policy = GenericHandler("fpga").policy_for(ctx, rdma(20))
    assert policy is binpack_for(settings, core_weight=1.0)
    assert (policy.card_binpack, policy.core_weight) == (False, 1.0)


def test_every_unregistered_type_gets_one_generic_handler_kept() -> None:
    assert isinstance(HANDLERS["rdma"], GenericHandler) and isinstance(HANDLERS["fpga"], GenericHandler)
    registry = Handlers()  # not the process-wide one: this test adds a type
    made = registry["example.com/npu"]
    assert isinstance(made, GenericHandler) and made.type == "example.com/npu"
    assert registry["example.com/npu"] is made and list(registry) == ["example.com/npu"]
    assert not isinstance(HANDLERS[names.GPU], GenericHandler)
