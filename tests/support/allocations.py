"""Builders of allocations for the codec tests: hypothesis strategies and one GPU grant."""

from __future__ import annotations

from hypothesis import strategies as st

from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation

gpu_grants = st.builds(
    DeviceGrant,
    type=st.just("gpu"),
    minor=st.integers(0, 15),
    id=st.text(max_size=12),
    core_milli=st.integers(0, 1000),
    memory=st.integers(0, 2**40),
    memory_ratio_milli=st.integers(0, 1000),
)
other_grants = st.builds(
    DeviceGrant,
    type=st.sampled_from(["rdma", "fpga"]),
    minor=st.integers(0, 7),
    id=st.text(max_size=12),
    core_milli=st.integers(0, 1000),
)
container_names = st.from_regex(r"[a-z]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)


@st.composite
def allocations(draw: st.DrawFn) -> PodAllocation:
    names_ = draw(st.lists(container_names, max_size=4, unique=True))
    containers = tuple(
        ContainerAllocation(name=n, devices=tuple(draw(st.lists(st.one_of(gpu_grants, other_grants), max_size=4))))
        for n in names_
    )
    return PodAllocation(node=draw(st.text(min_size=1, max_size=20)), containers=containers)


def gpu(minor: int, core: int, memory: int, ratio: int, id_: str = "") -> DeviceGrant:
    return DeviceGrant(type="gpu", minor=minor, id=id_, core_milli=core, memory=memory, memory_ratio_milli=ratio)
