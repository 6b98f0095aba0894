"""An unschedulable pod's FailedScheduling event is one short aggregated line, also at 1,000 nodes:
devshare's reasons name the ask, never a node's cards, so kube-scheduler counts them into one entry."""

from __future__ import annotations

import re

from e2e.conftest import Cluster


def test_failed_scheduling_event_is_aggregated_at_1000_nodes(cluster: Cluster) -> None:
    names = [f"ev-{i:04d}" for i in range(1000)]
    cluster.nodes(names, gpus=1, memory_gib=16)
    try:
        cluster.pod("sixty", {"koordinator.sh/gpu-core": "60", "koordinator.sh/gpu-memory": "40Gi"})
        msg = cluster.wait_event("sixty", "FailedScheduling", timeout=90)["message"]
        # kube-scheduler: "0/N nodes are available: K <devshare's reason>[, M node(s) didn't match ...]".
        # K is the number of nodes kube-scheduler asked the extender about: its own filters stop once
        # they have found percentageOfNodesToScore of the nodes feasible (adaptive: 42% at ~1,000).
        assert msg.startswith("0/"), msg
        found = re.search(r"\b(\d+) needs one gpu with 60 percent compute and 40 GiB: no card is that large\b", msg)
        assert found and int(found.group(1)) >= 100, msg
        assert msg.count("needs one gpu") == 1, msg  # one entry, however many nodes
        assert len(msg) < 400, msg
        assert "ev-0" not in msg and "gpu 0" not in msg and "MISSING" not in msg
    finally:
        cluster.delete_nodes()


def test_full_cards_read_as_one_resolvable_reason(cluster: Cluster) -> None:
    names = [f"full-{i}" for i in range(3)]
    cluster.nodes(names, gpus=1)
    for i in range(6):  # two halves on each card: every card full
        cluster.pod(f"holder-{i}", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory-ratio": "50"})
    for i in range(6):
        cluster.wait_bound(f"holder-{i}")
    cluster.pod("sixty", {"koordinator.sh/gpu-core": "60", "koordinator.sh/gpu-memory-ratio": "60"})
    msg = cluster.wait_event("sixty", "FailedScheduling", timeout=60)["message"]
    want = r"\b3 needs one gpu with 60 percent compute and 60 percent of memory: no card has that much free\b"
    assert re.search(want, msg), msg
