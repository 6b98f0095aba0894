"""What discovery found on a node (:mod:`devshare.agent.inventory`): GPUs are looked up by minor (their
device number), never by their position in the list."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.agent.inventory import Gpu, Inventory


def test_a_gpu_is_found_by_its_minor_not_its_position() -> None:
    inv = Inventory(gpus=(Gpu(minor=3, uuid="GPU-3"), Gpu(minor=0, uuid="GPU-0")))
    assert inv.gpu_by_minor(0) == Gpu(minor=0, uuid="GPU-0")
    assert inv.gpu_by_minor(3) is inv.gpus[0]
    assert inv.gpu_by_minor(1) is None
    assert Inventory().gpu_by_minor(0) is None


@settings(deadline=None)  # no test depends on machine speed
@given(st.sets(st.integers(0, 15), max_size=8), st.integers(0, 15))
def test_lookup_agrees_with_the_list(minors: set[int], wanted: int) -> None:
    inv = Inventory(gpus=tuple(Gpu(minor=m, uuid=f"GPU-{m}") for m in sorted(minors, reverse=True)))
    got = inv.gpu_by_minor(wanted)
    assert (got is not None) == (wanted in minors)
    assert got is None or got.uuid == f"GPU-{wanted}"
