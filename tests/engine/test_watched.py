"""The engine's watched cluster (engine/watched.py): the rules by which the informer's objects become
the state (bound pods, over-booking re-judged in order, pending pods kept for bind, trades), and the
guarantee that an incrementally fed state equals a rebuilt one."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from devshare.kube.memory import MemoryBackend
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.codecs import encode_canonical
from devshare.model.pod import parse_pod
from devshare.model.podresources import pod_node_requests
from support.cluster import usage_key
from support.kube import Following, GiB, device, node, plain_pod, pod

ops = st.lists(
    st.tuples(st.sampled_from(["bind", "plain", "delete", "finish", "touch", "device"]), st.integers(0, 5),
              st.sampled_from(["n1", "n2"]), st.integers(0, 3), st.integers(1, 60)),
    max_size=30,
)


@settings(max_examples=80, deadline=None)
@given(ops)
# a pod refused for over-booking is counted once the pod before it leaves (it runs on that card)
@example([("bind", 0, "n1", 0, 60), ("bind", 1, "n1", 0, 60), ("delete", 0, "n1", 0, 1)])
# a counted pod's allocation changes into over-booking: the pod that got the node first keeps the card
@example([("bind", 0, "n1", 0, 1), ("bind", 1, "n1", 0, 52), ("bind", 0, "n1", 0, 49)])
# a counted pod's allocation moves to another node: a pod refused on the node it left is counted there
@example([("bind", 0, "n1", 0, 13), ("bind", 1, "n1", 0, 28), ("bind", 2, "n1", 0, 60), ("bind", 0, "n2", 0, 1)])
def test_incremental_state_equals_a_rebuilt_one(script: list[tuple[str, int, str, int, int]]) -> None:
    """Whatever happens to pods and devices, the state fed by watch events equals the state rebuilt
    from a fresh list (the restart guarantee), and no device usage is negative."""
    mb = MemoryBackend()
    for n in ("n1", "n2"):
        mb.apply(node(n))
        mb.apply(device(n))
    live = Following(mb).listed(mb)
    seen = mb.store.rv
    for op, i, n, minor, pct in script:
        name = f"p{i}"
        if op == "bind":
            mb.apply(pod(name, node_name=n, grants=[(minor, pct, 1)], core=pct, memory_gib=1, cpu=f"{pct}m"))
        elif op == "plain" and not mb.store.get("pods", f"default/q{i}"):
            # a pod asking for no device (placed by kube-scheduler, or by any scheduler)
            mb.apply(plain_pod(f"q{i}", node_name=n, cpu=f"{pct * 100}m", memory=f"{minor + 1}Gi"))
        for key in (f"default/{name}", f"default/q{i}") if op in ("delete", "finish", "touch") else ():
            if not mb.store.get("pods", key):
                continue
            if op == "delete":
                mb.delete("pods", key)
            elif op == "finish":
                mb.apply({**mb.store.get("pods", key), "status": {"phase": "Succeeded"}})
            else:
                mb.store.patch("pods", key, {"metadata": {"labels": {"t": str(pct)}}})
        if op == "device":
            mb.apply(device(n, unhealthy=[minor] if pct % 2 else []))
        seen = live.replay(mb, seen)
    rebuilt = Following(mb).listed(mb)
    assert usage_key(live.state) == usage_key(rebuilt.state)
    assert set(live.state.pods) == set(rebuilt.state.pods)
    # each node's CPU and memory are what kube-scheduler counts: every bound, unfinished pod's requests
    for n in ("n1", "n2"):
        on_node = [o for o in mb.store.list("pods")[0] if o["spec"].get("nodeName") == n
                   and (o.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        row = live.state.row_of[n]
        assert int(live.state.cpu_used[row]) == sum(pod_node_requests(o)[0] for o in on_node)
        assert int(live.state.mem_used[row]) == sum(pod_node_requests(o)[1] for o in on_node)
    for t in live.state.tables.values():
        assert (t.used_core >= 0).all() and (t.used_mem >= 0).all() and (t.used_slots >= 0).all()


def one_node_synced() -> tuple[MemoryBackend, Following]:
    """A backend with node n1 and its Device, and a watched cluster that has listed it."""
    mb = MemoryBackend()
    mb.apply(node("n1"))
    mb.apply(device("n1"))
    return mb, Following(mb).listed(mb)


def test_a_stale_pending_event_does_not_undo_a_bind() -> None:
    """The watch delivers "annotated, still pending" after the extender has already bound the pod:
    the devices must stay taken (else another pod could be given them in between)."""
    mb, sync = one_node_synced()
    obj = mb.apply(pod("p", uid="u1"))
    seen = mb.store.rv
    req = parse_pod(obj)
    alloc = PodAllocation(node="n1", containers=(ContainerAllocation(name="main", devices=(
        DeviceGrant(type="gpu", minor=0, core_milli=500, memory=8 * GiB),)),))
    sync.lifecycle.assume(req, alloc, now=0.0)
    mb.store.patch("pods", "default/p", {"metadata": {"annotations": encode_canonical(alloc)}})
    mb.store.patch("pods", "default/p", {"spec": {"nodeName": "n1"}})
    sync.lifecycle.confirm(req, alloc)
    before = usage_key(sync.state)
    for ev in mb.store.events_since("pods", seen):
        sync.cluster.changed("pods", ev.type, ev.object)
        assert usage_key(sync.state) == before
    assert sync.state.pods["default/p"].phase == "bound"


def test_the_bound_pod_of_an_assumed_allocation_is_marked_bound_without_reading_its_request_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch often shows the extender's bound pod before the Binding's answer: the state holds that
    very allocation, assumed, so the event only marks it bound (the request of the pending version is
    kept, the pod is not parsed again). Another allocation, or another pod under the name, is read."""
    import devshare.engine.watched as watched_module

    _, sync = one_node_synced()
    grant = lambda minor: PodAllocation(node="n1", containers=(ContainerAllocation(name="main", devices=(  # noqa: E731
        DeviceGrant(type="gpu", minor=minor, core_milli=500, memory=8 * GiB),)),))
    parsed: list[str] = []
    real_parse = watched_module.parse_pod
    monkeypatch.setattr(watched_module, "parse_pod",
                        lambda obj: parsed.append(obj["metadata"]["name"]) or real_parse(obj))

    def bound(name: str, uid: str, alloc: PodAllocation) -> None:
        obj = pod(name, uid=uid)
        obj["metadata"]["annotations"] = encode_canonical(alloc)
        obj["spec"]["nodeName"] = "n1"
        obj["metadata"]["resourceVersion"] = "9"
        sync.cluster.changed("pods", "MODIFIED", obj)

    req = real_parse(pod("p", uid="u1"))
    sync.lifecycle.assume(req, grant(0), now=0.0)
    bound("p", "u1", grant(0))
    rec = sync.state.pods["default/p"]
    assert (rec.phase, rec.pod, parsed) == ("bound", req, [])
    # assumed on card 0 but bound on card 1 (written by someone else): the pod is read, card 1 counted
    q = real_parse(pod("q", uid="u2"))
    sync.lifecycle.assume(q, grant(0), now=0.0)
    bound("q", "u2", grant(1))
    assert parsed == ["q"] and sync.state.pods["default/q"].allocation == grant(1)
    assert sync.state.pods["default/q"].phase == "bound"
    # the same allocation, but a new pod under the name (another uid): the old record goes, the new pod is read
    r = real_parse(pod("r", uid="u3"))
    sync.lifecycle.assume(r, grant(2), now=0.0)
    bound("r", "u4", grant(2))
    assert parsed == ["q", "r"] and sync.state.pods["default/r"].pod.uid == "u4"


def ours(obj: dict[str, Any], scheduler: str = "devshare-scheduler") -> dict[str, Any]:
    obj["spec"]["schedulerName"] = scheduler
    return obj


def test_pending_pods_of_our_scheduler_are_kept_as_the_watch_delivers_them() -> None:
    mb = MemoryBackend()
    mb.apply(node("n1"))
    mb.apply(device("n1"))
    mb.apply(ours(pod("listed")))
    sync = Following(mb, scheduler_name="devshare-scheduler").listed(mb).cluster
    assert sync.pending_pod("default/listed") == mb.store.get("pods", "default/listed")
    seen = mb.store.rv
    mb.apply(ours(pod("other"), "default-scheduler"))  # another scheduler's pod: not kept
    mb.apply(ours(pod("p")))
    mb.store.patch("pods", "default/p", {"metadata": {"annotations": {"x": "1"}}})
    gone = mb.apply(ours(pod("gone")))
    mb.store.delete("pods", "default/gone")
    done = mb.apply(ours(pod("done")))
    mb.store.patch("pods", "default/done", {"status": {"phase": "Failed"}})
    mb.store.patch("pods", "default/listed", {"spec": {"nodeName": "n1"}})
    for ev in mb.store.events_since("pods", seen):
        sync.changed("pods", ev.type, ev.object)
    assert sync.pending_pod("default/p") == mb.store.get("pods", "default/p")  # the latest version
    assert sync.pending_pod("default/p")["metadata"]["annotations"] == {"x": "1"}  # type: ignore[index]
    for key in ("default/other", "default/gone", "default/done", "default/listed"):  # bound, deleted, finished
        assert sync.pending_pod(key) is None, key
    assert gone and done
    # a re-list drops the pending pods it no longer shows
    mb.store.delete("pods", "default/p")
    sync.listed("pods", mb.store.list("pods")[0], initial=False)
    assert sync.pending == {}


def test_pending_pods_are_bounded_and_the_oldest_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("devshare.engine.watched.MAX_PENDING", 2)
    sync = Following(MemoryBackend(), scheduler_name="s").cluster
    for name in ("a", "b", "c"):
        sync.changed("pods", "ADDED", ours(pod(name, uid=name), "s"))
    assert sorted(sync.pending) == ["default/a", "default/b"]  # scheduled first: kept; c is read at its bind
    sync.changed("pods", "MODIFIED", ours(pod("a", uid="a", annotations={"v": "2"}), "s"))
    assert sync.pending["default/a"]["metadata"]["annotations"] == {"v": "2"}  # a kept pod is still updated
    sync.changed("pods", "DELETED", ours(pod("b", uid="b"), "s"))
    sync.changed("pods", "MODIFIED", ours(pod("c", uid="c"), "s"))
    assert sorted(sync.pending) == ["default/a", "default/c"]


def test_without_a_scheduler_name_no_pending_pod_is_kept() -> None:
    sync = Following(MemoryBackend()).cluster
    sync.changed("pods", "ADDED", ours(pod("a")))
    assert sync.pending == {}


def usage_block(memory_used: int) -> dict[str, Any]:
    return {"at": "2026-11-28T07:40:00Z", "gpus": [{"minor": 0, "id": "GPU-0", "memoryUsed": memory_used,
                                                    "utilization": 0.25, "containers": []}]}


def test_the_usage_agents_report_is_kept_per_node_from_the_device_events() -> None:
    """Issue 39: /ui reads what each node's GPUs really use from its Device's status.usage."""
    mb, sync = one_node_synced()
    cluster = sync.cluster
    assert cluster.usage == {}
    seen = mb.store.rv
    mb.store.patch("devices", "n1", {"status": {"usage": usage_block(3 * GiB)}})
    sync.replay(mb, seen)
    assert cluster.usage["n1"].gpus[0].memory_used == 3 * GiB
    assert cluster.usage["n1"].gpus[0].utilization == 0.25
    # a bad block is dropped with a warning; the Device's inventory stays
    seen = mb.store.rv
    mb.store.patch("devices", "n1", {"status": {"usage": {"at": "x", "gpus": [{"minor": "zero"}]}}})
    sync.replay(mb, seen)
    assert "n1" not in cluster.usage and "n1" in sync.state.row_of
    assert cluster.invalid_objects == 0
    # a fresh report, then the Device deleted: its usage goes with it
    seen = mb.store.rv
    mb.store.patch("devices", "n1", {"status": {"usage": usage_block(GiB)}})
    sync.replay(mb, seen)
    assert cluster.usage["n1"].gpus[0].memory_used == GiB
    mb.store.delete("devices", "n1")
    cluster.listed("devices", mb.store.list("devices")[0], initial=False)  # a re-list without it
    assert cluster.usage == {}
