"""One predicate, "does this card take this share" (engine/admit.py): the filter's mask, the filter's
messages and reserve's check agree on every card, reason for reason."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine import selection
from devshare.engine.admit import Ask, Card, Reason, card_reason, card_reasons, describe
from devshare.engine.fit import Gather, card_fits, left_fits, memory_need
from devshare.engine.handlers.base import grant_for
from devshare.engine.handlers.share import describe_cards
from devshare.engine.state import ClusterState
from devshare.model.allocation import ContainerAllocation, PodAllocation
from devshare.model.device import DeviceInfo, NodeDevices
from devshare.model.node import node_info_from_labels
from devshare.model.request import DeviceRequest, GpuSelection
from support.cluster import GiB, occupy, pod

asks = st.one_of(
    st.builds(lambda c, m: DeviceRequest(type="gpu", core_milli=c, memory=m),
              st.sampled_from([0, 100, 300, 500, 1000]), st.sampled_from([0, GiB, 4 * GiB, 20 * GiB])),
    st.builds(lambda r: DeviceRequest(type="gpu", core_milli=r, memory_ratio_milli=r),
              st.sampled_from([100, 250, 500, 1000])),
    st.just(DeviceRequest(type="gpu", core_milli=1000, memory_ratio_milli=1000)),
    st.just(DeviceRequest(type="gpu", core_milli=1000)),
)
cards = st.lists(st.tuples(st.sampled_from([8 * GiB, 16 * GiB]), st.booleans(), st.booleans()), min_size=1,
                 max_size=4)
usage = st.lists(st.tuples(st.integers(0, 3), asks), max_size=6)


def build(cards_: list[tuple[int, bool, bool]], max_containers: int) -> ClusterState:
    state = ClusterState(max_containers_per_device=max_containers)
    state.upsert_node(node_info_from_labels("n"))
    devs = tuple(DeviceInfo(type="gpu", minor=i, id=f"G{i}", memory=m, health=h) for i, (m, h, _) in enumerate(cards_))
    held = tuple(f"G{i}" for i, (_, _, b) in enumerate(cards_) if b)
    state.set_devices(NodeDevices(node="n", devices=devs, held_outside=held))
    return state


def one_share(state: ClusterState, name: str, col: int, req: DeviceRequest) -> PodAllocation:
    g = grant_for(state.tables["gpu"], 0, col, req)
    return PodAllocation(node="n", containers=(ContainerAllocation(name="c0", devices=(g,)),))


@settings(max_examples=300, deadline=None)
@given(cards_=cards, used=usage, req=asks, max_containers=st.integers(1, 3),
       avoided=st.lists(st.integers(0, 3), max_size=2))
def test_reserve_accepts_exactly_what_filter_passes_reason_for_reason(
        cards_: list[tuple[int, bool, bool]], used: list[tuple[int, DeviceRequest]], req: DeviceRequest,
        max_containers: int, avoided: list[int]) -> None:
    """With a GPU selection too (HAMi's nouse-gpuuuid): the cards it leaves out are refused by the
    filter's mask, its messages and reserve alike, for the same reason."""
    state = build(cards_, max_containers)
    t = state.tables["gpu"]
    for k, (col, ask) in enumerate(used):  # any usage, even over-use: bound pods' annotations are the truth
        if col < t.count(0):
            occupy(state, pod(f"u{k}", ask), one_share(state, f"u{k}", col, ask))
    n = t.count(0)
    rows = np.array([0], np.int64)
    sel = GpuSelection(avoid_ids=tuple(f"G{i}" for i in avoided)) if avoided else None
    allowed = selection.allowed(state, t, sel) if sel is not None else None
    g = Gather(t, rows, allowed)
    mask = card_fits(g, req, max_containers)[0, :n]
    need = memory_need(req, t.total_mem[0, :n])
    excluded = np.array(selection.excluded_cards(state, t, 0, sel), np.bool_)
    card = Card(t.present[0, :n], t.healthy[0, :n], t.blocked[0, :n], t.total_core[0, :n], t.total_mem[0, :n],
                t.free_core[0, :n], t.free_mem[0, :n], t.used_slots[0, :n], excluded)
    ask = Ask(req.core_milli, need, req.whole, 1, max_containers)
    codes = card_reasons(card, ask)
    # the scalar form (reserve's) and the array form (the filter's) of the rules agree card by card
    needs = np.broadcast_to(need, (n,))
    assert codes.tolist() == [
        card_reason(Card(*(x[j].item() for x in card)), ask._replace(memory=int(needs[j]))) for j in range(n)]
    # the filter's hot-path mask is the predicate
    assert mask.tolist() == (codes == Reason.FITS).tolist()
    messages = describe_cards(t, 0, req, max_containers, allowed)
    p = pod("asker", req, gpu_selection=sel)
    for col in range(n):
        verdict = state.why_not(p, one_share(state, "asker", col, req))
        if codes[col] == Reason.FITS:
            assert verdict is None
            assert f"gpu {col}:" not in messages
        else:
            # reserve refuses with the filter's own reason, in the filter's own words
            want = describe(int(codes[col]), f"gpu {col}", total_core=int(t.total_core[0, col]),
                            total_mem=int(t.total_mem[0, col]), free_core=int(t.free_core[0, col]),
                            free_mem=int(t.free_mem[0, col]), slots=int(t.used_slots[0, col]),
                            core=req.core_milli, memory=int(np.broadcast_to(need, (n,))[col]),
                            max_containers=max_containers)
            assert verdict == want
            assert want in messages


def test_every_reason_has_a_message() -> None:
    for r in Reason:
        text = describe(r, "gpu 0", total_core=1000, total_mem=GiB, free_core=0, free_mem=0, slots=2, core=500,
                        memory=GiB, max_containers=2)
        assert (text == "") == (r is Reason.FITS)


@settings(max_examples=200, deadline=None)
@given(cards_=st.lists(st.tuples(st.booleans(), st.sampled_from([0, 300, 1000]), st.sampled_from([8 * GiB, 16 * GiB]),
                                 st.integers(-200, 1000), st.integers(-GiB, 16 * GiB), st.integers(0, 3)),
                       min_size=1, max_size=6),
       req=asks, max_containers=st.integers(1, 3))
def test_greedys_running_mask_is_the_predicate(cards_: list[tuple[bool, int, int, int, int, int]],
                                                req: DeviceRequest, max_containers: int) -> None:
    """fit.greedy places containers one after another on running copies of the arrays; its mask
    over what is left is the card predicate too."""
    usable, total_core, total_mem, free_core, free_mem, slots = (np.array(x) for x in zip(*cards_, strict=True))
    free_core = np.minimum(free_core, total_core)
    free_mem = np.minimum(free_mem, total_mem)
    need = memory_need(req, total_mem)
    mask = left_fits(usable, free_core, free_mem, slots, req, need, max_containers)
    codes = card_reasons(Card(usable, True, False, total_core, total_mem, free_core, free_mem, slots),
                         Ask(req.core_milli, need, req.whole, 1, max_containers))
    assert mask.tolist() == (codes == Reason.FITS).tolist()
