"""The allocation history ring (server/extender/history.py)."""

from __future__ import annotations

import pytest

from devshare.engine.state import ClusterState
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.server.extender.history import History, sample_of
from support.cluster import GiB, add_node, gpu, occupy, pod

MiB = 2**20


def state_with(*grants: tuple[int, int, int]) -> ClusterState:
    """Node n0 with 4 cards of 16 GiB (card 3 unhealthy); each grant (minor, core %, memory) bound."""
    state = ClusterState()
    add_node(state, "n0", 4, memory=16 * GiB, unhealthy=[3])
    for i, (minor, core, memory) in enumerate(grants):
        alloc = PodAllocation(node="n0", containers=(ContainerAllocation(name="c0", devices=(
            DeviceGrant(type="gpu", minor=minor, id=f"GPU-n0-{minor}", core_milli=core * 10, memory=memory),)),))
        assert occupy(state, pod(f"p{i}", gpu(core, memory)), alloc) is None
    return state


def test_a_sample_is_allocated_and_stranded_percent_of_the_available_cards() -> None:
    # card 0: 20% and all but 128 MiB (80% stranded); card 1: 50%; card 2 idle; card 3 unhealthy
    s = sample_of(state_with((0, 20, 16 * GiB - 128 * MiB), (1, 50, 8 * GiB)), at=5.0)
    assert (s.at, s.gpus) == (5.0, 3)
    assert s.allocated_pct == pytest.approx(100 * 70 / 300, abs=0.01)
    assert s.stranded_pct == pytest.approx(100 * 80 / 300, abs=0.01)
    assert sample_of(ClusterState(), at=1.0).gpus == 0


def test_the_history_keeps_the_last_samples() -> None:
    now = [0.0]
    h = History(state_with((1, 50, GiB)), lambda: now[0], interval=10, size=3)
    for _ in range(5):
        now[0] += 10
        h.take()
    out = h.json()
    assert out["size"] == 3 and out["intervalSeconds"] == 10
    assert [s["at"] for s in out["samples"]] == [30.0, 40.0, 50.0]  # type: ignore[index, union-attr]
