"""The extender killed and started again rebuilds the same usage from the pods' annotations; a pod
deleted, or finished (phase Succeeded or Failed), frees its devices, and the pod waiting for them is
scheduled: the extender nudges it once its own state has freed them (server/extender/requeue.py),
whatever order kube-scheduler and the extender saw the deletion in."""

from __future__ import annotations

import signal

from e2e.cluster import wait_until
from e2e.conftest import Cluster, allocation


def _usage(cluster: Cluster) -> list[tuple[str, int, dict[str, object], list[str]]]:
    return sorted((n["name"], d["minor"], d["used"], sorted(d["pods"]))
                  for n in cluster.inspect()["nodes"] for d in n["devices"])


def test_deleted_and_finished_pods_free_their_devices(cluster: Cluster) -> None:
    cluster.node("free-1", gpus=1)
    whole = {"nvidia.com/gpu": "1"}
    cluster.pod("a", whole)
    cluster.wait_bound("a")
    cluster.pod("b", whole)
    cluster.wait_event("b", "FailedScheduling")
    cluster.delete_pod("a")
    # b takes the card as soon as kube-scheduler retries it after the deletion (or the extender's
    # nudge): the card is never seen free in between, but it holds b alone
    cluster.wait_bound("b", timeout=60)
    wait_until(lambda: [[p.rsplit("/", 1)[0] for p in d["pods"]] for n in cluster.inspect()["nodes"]
                        if n["name"] == "free-1" for d in n["devices"]] == [[f"{cluster.ns}/b"]],
               timeout=60, interval=0.3, what="the card held by b alone")

    cluster.set_phase("b", "Succeeded")
    _wait_free(cluster)
    cluster.pod("c", whole)
    cluster.wait_bound("c", timeout=60)

    cluster.set_phase("c", "Failed")
    wait_until(lambda: not any(d["pods"] for n in cluster.inspect()["nodes"] for d in n["devices"]),
               what="a failed pod's card freed")


def test_restart_rebuilds_the_same_usage_from_annotations(cluster: Cluster) -> None:
    cluster.nodes(["restart-1", "restart-2"], gpus=2)
    asks = [{"koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory": "4Gi"},
            {"nvidia.com/gpu": "1"},
            {"aliyun.com/gpu-mem": "3000"},
            {"koordinator.sh/gpu": "50"}]
    for i, ask in enumerate(asks):
        cluster.pod(f"r-{i}", ask)
    allocs = {f"r-{i}": allocation(cluster.wait_bound(f"r-{i}")) for i in range(len(asks))}
    before = _usage(cluster)
    assert any(pods for *_, pods in before)

    cp = cluster.cp
    cp.processes["extender"].signal(signal.SIGKILL)
    cp.processes["extender"].popen.wait()  # type: ignore[union-attr]
    cp.start_extender()
    assert _usage(cluster) == before
    # the annotations did not change either: the restart rewrote nothing
    assert {f"r-{i}": allocation(cluster.get_pod(f"r-{i}")) for i in range(len(asks))} == allocs


def _wait_free(cluster: Cluster) -> None:
    wait_until(lambda: not any(d["pods"] for n in cluster.inspect()["nodes"] for d in n["devices"]),
               timeout=60, interval=0.3, what="the extender sees the card free")
