"""A trade: two identical pods of a node exchange their allocation annotations. What a trade
exchanges (every dialect's allocation annotations, not the marks of when and whether the pod was
assigned), the patch each pod gets, and which pods may trade."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.model import dialects, names, trade
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.dialects import aliyun
from devshare.model.dialects.base import Dialect
from devshare.model.dialects.koordinator_names import KOORD_DEVICE_ALLOCATED
from devshare.model.problems import Problems
from devshare.model.request import DeviceRequest


def test_a_trade_exchanges_the_allocation_not_the_marks() -> None:
    keys = trade.traded_keys()
    assert {names.ALLOCATION, KOORD_DEVICE_ALLOCATED, aliyun.ALIYUN_IDX, names.TOPOLOGY_GPU} <= keys
    assert not keys & trade.KEPT
    assert trade.is_traded(names.ALLOCATION)
    assert not trade.is_traded(names.ASSIGNED) and not trade.is_traded(aliyun.ALIYUN_ASSUME_TIME)
    assert not trade.is_traded("app.example/owner")
    assert all(trade.is_traded(p + "0") for p in trade.traded_prefixes())


def test_traded_annotations_of_a_pod() -> None:
    ann: dict[Any, str] = {names.ALLOCATION: '{"node": "n"}', names.ASSIGNED: "true", aliyun.ALIYUN_IDX: "1",
                           aliyun.ALIYUN_ASSUME_TIME: "5", "team": "a", 7: "not a key"}
    assert trade.traded(ann) == {names.ALLOCATION: '{"node": "n"}', aliyun.ALIYUN_IDX: "1"}


def test_a_leg_takes_the_partners_allocation_and_drops_what_it_lacks() -> None:
    mine = {names.ALLOCATION: "mine", aliyun.ALIYUN_DEV: "16", names.ASSIGNED: "true", "team": "a"}
    partner = {names.ALLOCATION: "theirs", aliyun.ALIYUN_IDX: "2", names.ASSIGNED: "false", "team": "b"}
    assert trade.leg(mine, partner, "uid-b") == {names.ALLOCATION: "theirs", aliyun.ALIYUN_IDX: "2",
                                                  aliyun.ALIYUN_DEV: None, names.TRADE: "uid-b"}


annotation_maps = st.dictionaries(st.sampled_from(sorted(trade.traded_keys() | trade.KEPT | {"team", "x/y"})),
                                  st.text(max_size=4), max_size=6)


@given(annotation_maps, annotation_maps)
def test_after_both_legs_each_pod_holds_what_the_other_held(a: dict[str, str], b: dict[str, str]) -> None:
    def applied(ann: dict[str, str], patch: dict[str, str | None]) -> dict[str, str]:
        out = {**ann, **{k: v for k, v in patch.items() if v is not None}}
        return {k: v for k, v in out.items() if patch.get(k, "") is not None}

    a2, b2 = applied(a, trade.leg(a, b, "ub")), applied(b, trade.leg(b, a, "ua"))
    assert trade.traded(a2) == trade.traded(b) and trade.traded(b2) == trade.traded(a)
    assert {k: v for k, v in a2.items() if not trade.is_traded(k) and k != names.TRADE} == \
        {k: v for k, v in a.items() if not trade.is_traded(k) and k != names.TRADE}
    assert (a2[names.TRADE], b2[names.TRADE]) == ("ub", "ua")


def alloc(minor: int, core: int = 500, node: str = "n") -> PodAllocation:
    return PodAllocation(node=node, containers=(ContainerAllocation(name="c", devices=(
        DeviceGrant(type="gpu", minor=minor, id=f"GPU-{minor}", core_milli=core, memory=2**30),)),))


def test_pods_are_interchangeable_when_they_got_the_same_amounts_in_the_same_dialect() -> None:
    koord = {KOORD_DEVICE_ALLOCATED: "{}", names.ALLOCATION: "{}"}
    assert trade.shape(alloc(0)) == trade.shape(alloc(3))
    assert trade.interchangeable(alloc(0), alloc(3), koord, dict(koord, team="x"))
    assert not trade.interchangeable(alloc(0), alloc(3, core=400), koord, koord)
    assert not trade.interchangeable(alloc(0), alloc(0, node="m"), koord, koord)
    assert not trade.interchangeable(alloc(0), alloc(3), koord, {aliyun.ALIYUN_IDX: "3", names.ALLOCATION: "{}"})


def test_group_and_gang_members_never_trade() -> None:
    assert trade.in_group({names.GROUP_NAME: "job"}, {})
    assert trade.in_group({}, {names.GANG_NAME: "job"})
    assert trade.in_group({}, {names.TOPOLOGY_GPU: "{}"})
    assert not trade.in_group({"app": "web"}, {names.GANG_NAME + "x": "job"})


class Stamped(Dialect):
    name = "stamped"
    resource_names = frozenset({"stamp.example/gpu"})
    allocation_annotations = frozenset({"stamp.example/cards"})
    allocation_prefixes = ("stamp.example/container-",)

    def read(self, resources: dict[str, Any], where: str, problems: Problems, context: Any,
             index: int) -> list[DeviceRequest]:
        return []


@pytest.fixture
def stamped() -> Iterator[None]:
    dialects.register(Stamped())
    try:
        yield
    finally:
        dialects.unregister(Stamped.name)


def test_a_dialect_registered_later_is_traded_too(stamped: None) -> None:
    assert "stamp.example/cards" in trade.traded_keys()
    assert trade.is_traded("stamp.example/container-main")
    assert trade.traded({"stamp.example/container-main": "0", "stamp.example/cards": "1"}) == {
        "stamp.example/container-main": "0", "stamp.example/cards": "1"}
