"""The scheduler follows the node agent's trades (devshare.engine.trades): the two writes of a trade
are applied together, so the usage never counts a card twice nor refuses a pod in between; a write
whose partner never comes is applied alone, through the over-booking check."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.engine.watched import WatchedCluster
from devshare.kube.memory import MemoryBackend
from devshare.model import trade
from devshare.model.names import ALLOCATION, TRADE
from support.cluster import usage_key
from support.kube import device, node, pod

CARDS = 2  # 3 pods of 30% on card 0, 3 on card 1: a card holds at most 3 of them


def watched(clock: list[float] | None = None) -> WatchedCluster:
    now = clock if clock is not None else [0.0]
    return WatchedCluster(Lifecycle(Scheduler(ClusterState())), clock=lambda: now[0], trade_timeout=30.0)


def cluster(n: int) -> tuple[MemoryBackend, WatchedCluster, list[float]]:
    """``n`` identical pods of 30% + 4 GiB bound to n1, spread over its two cards (full at 3 each)."""
    mb = MemoryBackend()
    mb.apply(node("n1"))
    mb.apply(device("n1", gpus=CARDS))
    for i in range(n):
        mb.apply(pod(f"p{i}", uid=f"u{i}", node_name="n1", grants=[(i % CARDS, 30, 4)], core=30, memory_gib=4))
    clock = [0.0]
    sync = watched(clock)
    for kind in ("nodes", "devices", "pods"):
        sync.listed(kind, mb.store.list(kind)[0], initial=True)
    return mb, sync, clock


def rebuilt(mb: MemoryBackend) -> WatchedCluster:
    """A fresh state listed from the cluster (a restart)."""
    sync = watched()
    for kind in ("nodes", "devices", "pods"):
        sync.listed(kind, mb.store.list(kind)[0], initial=True)
    return sync


def annotations(mb: MemoryBackend, name: str) -> dict[str, Any]:
    obj = mb.store.get("pods", f"default/{name}")
    assert obj is not None
    return dict(obj["metadata"]["annotations"])


def write(mb: MemoryBackend, name: str, patch: dict[str, str | None]) -> None:
    mb.store.patch("pods", f"default/{name}", {"metadata": {"annotations": patch}})


def follow(mb: MemoryBackend, sync: WatchedCluster, seen: int) -> int:
    for ev in mb.store.events_since("pods", seen):
        sync.changed("pods", ev.type, ev.object)
    return int(mb.store.rv)


def legs(mb: MemoryBackend, a: str, b: str) -> list[tuple[str, dict[str, str | None]]]:
    """The agent's two writes: ``a`` takes ``b``'s allocation and ``b`` takes ``a``'s."""
    ann_a, ann_b = annotations(mb, a), annotations(mb, b)
    return [(a, trade.leg(ann_a, ann_b, f"u{b[1:]}")), (b, trade.leg(ann_b, ann_a, f"u{a[1:]}"))]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(4, 6), trades=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), min_size=1,
                                             max_size=4), seed=st.integers(0, 2**16), relist=st.booleans())
def test_usage_never_changes_while_pods_trade(n: int, trades: list[tuple[int, int]], seed: int,
                                             relist: bool) -> None:
    """Whatever pairs trade, in whatever order their writes interleave (the agent writes each trade's
    two in order, trades one after the other; the watch may deliver them late, or a re-list may
    see only the end): after every event the usage is the one before, nothing is refused, and the
    end equals a state rebuilt from the annotations."""
    rng = random.Random(seed)
    mb, sync, _ = cluster(n)
    before = usage_key(sync.state)
    seen = int(mb.store.rv)
    for a, b in trades:
        a, b = a % n, b % n
        if a == b or not trade.interchangeable(*(sync.state.pods[f"default/p{i}"].allocation for i in (a, b)),
                                               annotations(mb, f"p{a}"), annotations(mb, f"p{b}")):
            continue
        for name, patch in legs(mb, f"p{a}", f"p{b}"):
            write(mb, name, patch)
            if not relist and rng.random() < 0.5:
                seen = follow(mb, sync, seen)
                assert usage_key(sync.state) == before
    if relist:
        for key in sync.listed("pods", mb.store.list("pods")[0], initial=False):
            sync.lifecycle.release(key)
    else:
        follow(mb, sync, seen)
    assert usage_key(sync.state) == before
    assert sync.overbooked == 0 and not sync.trades.parked
    fresh = rebuilt(mb)
    assert {k: r.allocation for k, r in fresh.state.pods.items()} == {
        k: r.allocation for k, r in sync.state.pods.items()}


def test_first_write_waits_for_the_second() -> None:
    mb, sync, _ = cluster(6)  # cards 0 and 1 full: p0 taking p1's card alone would over-book it
    seen = int(mb.store.rv)
    (a, first), (b, second) = legs(mb, "p0", "p1")
    write(mb, a, first)
    seen = follow(mb, sync, seen)
    assert sync.state.pods["default/p0"].allocation.containers[0].devices[0].minor == 0  # parked: old record
    assert set(sync.trades.parked) == {"u0"} and sync.overbooked == 0
    write(mb, b, second)
    follow(mb, sync, seen)
    assert sync.state.pods["default/p0"].allocation.containers[0].devices[0].minor == 1
    assert sync.state.pods["default/p1"].allocation.containers[0].devices[0].minor == 0
    assert not sync.trades.parked and sync.trades.exchanged == 1 and sync.overbooked == 0


def test_a_write_whose_partner_never_comes_is_applied_alone_and_checked() -> None:
    mb, sync, clock = cluster(6)
    seen = int(mb.store.rv)
    (a, first), _ = legs(mb, "p0", "p1")
    write(mb, a, first)
    follow(mb, sync, seen)
    clock[0] = 29.0
    sync.trades.expire()
    assert set(sync.trades.parked) == {"u0"}
    clock[0] = 30.0
    sync.trades.expire()
    # alone it puts a fourth 30% on card 1: the node is judged in the order its pods got it, as a
    # restart would, so p0 (the first) is counted on card 1 and the last pod there is refused, counted
    assert not sync.trades.parked and sync.trades.unpaired == 1 and sync.overbooked == 1
    assert sync.state.pods["default/p0"].allocation.containers[0].devices[0].minor == 1
    assert "default/p5" not in sync.state.pods and usage_key(sync.state) == usage_key(rebuilt(mb).state)


def test_a_write_whose_partner_is_deleted_is_applied_alone() -> None:
    mb, sync, _ = cluster(4)
    seen = int(mb.store.rv)
    (a, first), _ = legs(mb, "p0", "p1")
    write(mb, a, first)
    seen = follow(mb, sync, seen)
    mb.delete("pods", "default/p1")
    follow(mb, sync, seen)
    assert not sync.trades.parked and sync.overbooked == 0
    assert sync.state.pods["default/p0"].allocation.containers[0].devices[0].minor == 1


def test_untagged_changes_and_the_bind_path_are_untouched() -> None:
    """Only a tagged change of a recorded allocation is parked: a pod's first allocation, or a change
    without the tag (written by hand), is applied as before."""
    mb, sync, _ = cluster(4)
    seen = int(mb.store.rv)
    write(mb, "p0", {ALLOCATION: annotations(mb, "p1")[ALLOCATION]})  # no tag
    follow(mb, sync, seen)
    assert not sync.trades.parked
    assert sync.state.pods["default/p0"].allocation.containers[0].devices[0].minor == 1
    fresh = pod("new", uid="u9", node_name="n1", grants=[(0, 10, 1)], core=10, memory_gib=1,
                annotations={TRADE: "u0"})
    mb.apply(fresh)
    follow(mb, sync, int(mb.store.rv) - 1)
    assert "default/new" in sync.state.pods and not sync.trades.parked
