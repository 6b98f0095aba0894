"""The node rows (engine/nodetables.py): a row per node, reused once its node is gone; names mapped
to indexes and back; every version bumped on the change it stands for."""

from __future__ import annotations

from devshare.engine.state import ClusterState
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.device import DeviceInfo, NodeDevices
from support.cluster import GiB, add_node, gpu, occupy, pod


def test_indexes_of_known_and_unknown_names_and_back() -> None:
    s = ClusterState()
    for n in ("a", "b", "c"):
        add_node(s, n, 1)
    idx, known, unknown = s.indexes_of(["c", "ghost", "a"])
    assert known == ["c", "a"] and unknown == ["ghost"]
    assert [s.name_at(int(i)) for i in idx] == ["c", "a"]
    assert s.node_rows().tolist() == sorted(s.row_of.values())


def test_a_removed_nodes_row_is_reused_and_every_version_moves() -> None:
    s = ClusterState()
    add_node(s, "a", 2)
    add_node(s, "b", 2)
    row_b, layout, names_v = s.row_of["b"], s.layout, s.names_version
    s.remove_node("b")
    assert s.name_at(row_b) is None and s.layout > layout and s.names_version > names_v
    assert s.tables["gpu"].count(row_b) == 0 and not s.active[row_b]
    add_node(s, "c", 1)
    assert s.row_of["c"] == row_b  # the free row is taken again
    assert s.gpu_memory("c") == {0: 16 * GiB}


def test_devices_reloaded_under_pods_count_their_usage_again() -> None:
    """A Device update reloads the node's columns; the pods recorded there are counted again on them
    (ClusterState's _recount), a device gone leaving its pod's record in place."""
    s = ClusterState()
    add_node(s, "a", 2)
    alloc = PodAllocation(node="a", containers=(ContainerAllocation(name="c0", devices=(
        DeviceGrant(type="gpu", minor=1, id="GPU-a-1", core_milli=400, memory=GiB),)),))
    occupy(s, pod("p", gpu(40, GiB)), alloc)
    row, usage = s.row_of["a"], s.row_version[s.row_of["a"]]
    s.set_devices(NodeDevices(node="a", devices=tuple(
        DeviceInfo(type="gpu", minor=i, id=f"GPU-a-{i}", memory=32 * GiB) for i in range(2))))
    t = s.tables["gpu"]
    assert t.used_core[row, 1] == 400 and t.total_mem[row, 1] == 32 * GiB and s.row_version[row] > usage
    s.set_devices(NodeDevices(node="a", devices=(DeviceInfo(type="gpu", minor=0, id="GPU-a-0", memory=GiB),)))
    assert t.count(row) == 1 and int(t.used_core[row, 0]) == 0 and "default/p" in s.pods


def test_a_node_that_says_what_it_said_before_changes_nothing() -> None:
    """Most Node updates (heartbeats, conditions, taints such as devshare's own steering taint) change
    nothing devshare reads: every version stays, so no kept answer and no per-layout table is rebuilt.
    A change it reads (here: cordoned) moves them."""
    s = ClusterState()
    add_node(s, "a", 2)
    info = s.nodes["a"]
    versions = (s.version, s.layout, s.row_version[s.row_of["a"]])
    s.upsert_node(type(info)(**{f: getattr(info, f) for f in info.__struct_fields__}))  # equal, not the same
    assert (s.version, s.layout, s.row_version[s.row_of["a"]]) == versions
    s.upsert_node(type(info)(**{**{f: getattr(info, f) for f in info.__struct_fields__}, "unschedulable": True}))
    assert s.version > versions[0] and s.layout > versions[1] and not s.active[s.row_of["a"]]
