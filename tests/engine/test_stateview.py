"""The copies the views over every device read (engine/stateview.py): taken at once, unchanged by
what the state does afterwards, and turned into DESIGN.md's inspect JSON."""

from __future__ import annotations

from devshare.engine.state import ClusterState
from devshare.engine.stateview import device_columns, inspect_view, view_of
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from support.cluster import GiB, add_node, gpu, occupy, pod, records


def test_a_view_is_a_copy_the_state_no_longer_changes() -> None:
    s = ClusterState()
    add_node(s, "a", 2, memory=8 * GiB)
    alloc = PodAllocation(node="a", containers=(ContainerAllocation(name="c0", devices=(
        DeviceGrant(type="gpu", minor=1, id="GPU-a-1", core_milli=300, memory=2 * GiB),)),))
    occupy(s, pod("p", gpu(30, 2 * GiB)), alloc)
    view = view_of(s, s.pods)
    before = inspect_view(view)
    records(s).release("default/p")
    add_node(s, "b", 1)
    assert inspect_view(view) == before  # the copy: what the state held when it was taken
    gpus = before["nodes"][0]["devices"]
    assert [d["used"]["core"] for d in gpus] == [0.0, 30.0] and gpus[1]["pods"] == ["default/p/c0"]
    assert gpus[1]["used"]["memory"] == 2 * GiB and gpus[1]["total"]["memory"] == 8 * GiB
    assert "placedByPeers" not in before
    assert inspect_view(view_of(s, s.pods)) == s.inspect()


def test_columns_hold_every_device_by_type() -> None:
    s = ClusterState()
    add_node(s, "a", 2, rdma=1, unhealthy=[0])
    add_node(s, "b", 1)
    cols = {c.type: c for c in device_columns(s)}
    assert sorted(cols) == ["gpu", "rdma"]
    assert cols["gpu"].node == ["a", "a", "b"] and cols["gpu"].healthy.tolist() == [False, True, True]
    assert cols["gpu"].memory and not cols["rdma"].memory


def test_pods_placed_by_peers_are_listed_with_their_problems() -> None:
    s = ClusterState()
    add_node(s, "a", 1)
    alloc = PodAllocation(node="a", containers=(ContainerAllocation(name="c0", devices=(
        DeviceGrant(type="gpu", minor=0, id="GPU-a-0", core_milli=1000, memory=0),)),))
    records(s).add_placed(pod("hami-pod", gpu(100)), alloc, peer="hami", problems=("a card it names is unknown",))
    assert inspect_view(view_of(s, s.pods))["placedByPeers"] == [
        {"pod": "default/hami-pod", "node": "a", "by": "hami", "problems": ["a card it names is unknown"]}]
