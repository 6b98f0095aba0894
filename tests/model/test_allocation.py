"""A pod's allocation: its grants, the cards it uses, and what it holds of each card, counted as
kubelet runs init containers (one at a time, before the app containers, handing their devices on)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from devshare.model.allocation import CardUsage, ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.request import WHOLE

GiB = 2**30


def grant(minor: int, core: int = 0, memory: int = 0, ratio: int = 0, *, type: str = "gpu",
          id: str = "") -> DeviceGrant:
    return DeviceGrant(type=type, minor=minor, id=id, core_milli=core, memory=memory, memory_ratio_milli=ratio)


def pod(*containers: ContainerAllocation) -> PodAllocation:
    return PodAllocation(node="n", containers=containers)


def c(name: str, *grants: DeviceGrant, init: bool = False) -> ContainerAllocation:
    return ContainerAllocation(name=name, devices=grants, init=init)


def test_grants_and_minors_in_first_use_order() -> None:
    a = pod(c("a", grant(3, 500), grant(0, type="rdma")), c("b", grant(1, 200), grant(3, 100)))
    assert [(i, g.minor) for i, g in a.grants()] == [(0, 3), (0, 0), (1, 1), (1, 3)]
    assert a.minors("gpu") == [3, 1]
    assert a.minors("rdma") == [0]
    assert a.minors("fpga") == []
    assert pod().grants() == [] and pod(c("idle")).usage() == []


def test_app_containers_on_one_card_add_up() -> None:
    a = pod(c("a", grant(0, 300, 4 * GiB, id="GPU-0")), c("b", grant(0, 200, 2 * GiB, 100)), c("x", grant(1, WHOLE)))
    assert a.usage() == [
        CardUsage(type="gpu", minor=0, core_milli=500, memory=6 * GiB, slots=2, whole=False, memory_ratio_milli=100,
                  id="GPU-0"),
        CardUsage(type="gpu", minor=1, core_milli=WHOLE, memory=0, slots=1, whole=True),
    ]


def test_an_init_container_counts_the_larger_of_it_and_the_app_containers() -> None:
    """HAMi's CollapseInitContainerUsage: per card, max(largest init container, sum of app containers)."""
    a = pod(c("warm", grant(0, 800, 2 * GiB), init=True), c("warm2", grant(0, 100, 10 * GiB), init=True),
            c("a", grant(0, 300, 4 * GiB)), c("b", grant(0, 200, 1 * GiB)))
    (u,) = a.usage()
    assert (u.core_milli, u.memory, u.slots) == (800, 10 * GiB, 2)
    # a card only an init container used is held too (kubelet hands it on), with one slot
    (only,) = pod(c("warm", grant(2, 400, GiB, id="GPU-2"), init=True), c("a")).usage()
    assert (only.minor, only.core_milli, only.memory, only.slots, only.id) == (2, 400, GiB, 1, "GPU-2")


def test_whole_means_all_compute_and_all_memory() -> None:
    assert pod(c("a", grant(0, WHOLE, 0, WHOLE))).usage()[0].whole
    assert not pod(c("a", grant(0, WHOLE, 8 * GiB))).usage()[0].whole  # memory in bytes: shared
    assert pod(c("w", grant(0, WHOLE), init=True), c("a", grant(0, 100))).usage()[0].whole


grants = st.builds(grant, st.integers(0, 3), st.integers(0, WHOLE), st.integers(0, 80 * GiB), st.integers(0, WHOLE))
containers = st.builds(lambda gs, init: c("c", *gs, init=init), st.lists(grants, max_size=4), st.booleans())


@given(st.lists(containers, max_size=5))
def test_usage_lies_between_the_largest_grant_and_the_sum(cs: list[ContainerAllocation]) -> None:
    """Per card: at least every single grant (nothing held is forgotten), at most the sum of every
    grant (nothing is counted twice), and exactly the sum when no init container is there."""
    a = pod(*cs)
    usage = {u.minor: u for u in a.usage()}
    assert list(usage) == a.minors("gpu")
    for minor, u in usage.items():
        on = [(ci, g) for ci, g in a.grants() if g.minor == minor]
        assert all(g.core_milli <= u.core_milli and g.memory <= u.memory for _, g in on)
        assert u.core_milli <= sum(g.core_milli for _, g in on) and u.memory <= sum(g.memory for _, g in on)
        if not any(cs[ci].init for ci, _ in on):
            assert (u.core_milli, u.memory, u.slots) == (sum(g.core_milli for _, g in on),
                                                          sum(g.memory for _, g in on), len(on))
