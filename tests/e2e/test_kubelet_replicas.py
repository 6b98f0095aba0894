"""Identical replicas on one node, admitted by kubelet's own device manager (kubelet-harness, built
from k8s.io/kubernetes v1.37's pkg/kubelet/cm/devicemanager) through devshare's agent, with the real
control plane behind it: on a fresh node (no kubelet checkpoint when the agent starts) every replica
starts, whatever order kubelet admits them in, with exactly the cards its pod's final annotation
records; across an agent restart too. Pods that differ are refused with the agent's reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e2e.conftest import Cluster
from e2e.kubelet import NodeSide, check_containers

GIB = 2**30
ASK = {"koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory-ratio": "30"}
SERVED = {"koordinator.sh/gpu-core": 200, "koordinator.sh/gpu-memory-ratio": 200}


def check(side: NodeSide, names: list[str], results: dict[str, dict[str, Any]]) -> None:
    check_containers(side, names, results, card_memory=16 * GIB)


def test_identical_replicas_on_a_fresh_node_all_start(cluster: Cluster, tmp_path: Path) -> None:
    side = NodeSide(cluster, tmp_path, "fresh-1", gpus=2)
    try:
        assert not side.kubelet.checkpoint.exists()
        side.start_agent()  # before kubelet: no kubelet.sock, no checkpoint
        ready = side.kubelet.start()
        assert ready["restored"] == []
        side.wait_registered(SERVED)
        assert side.kubelet.checkpoint.exists()  # written with the first device list, before any Allocate
        names = [f"r{i}" for i in range(6)]
        for n in names:
            cluster.pod(n, ASK)
        for n in names:
            cluster.wait_bound(n, timeout=60)
        # kubelet admits in the reverse order of binding: every first call is ambiguous, and the pod
        # that stands in is never the one kubelet admits
        results = {n: side.admit(n) for n in reversed(names)}
        check(side, names, results)
        traded = [n for n in names if "devshare.io/trade" in cluster.get_pod(n)["metadata"]["annotations"]]
        assert traded, "the allocations of pods on different cards were exchanged"
        assert side.agent.alive, side.agent.tail()
    finally:
        side.close()


def test_replicas_of_two_containers_across_an_agent_restart(cluster: Cluster, tmp_path: Path) -> None:
    side = NodeSide(cluster, tmp_path, "agent-restart-1", gpus=2)
    try:
        side.start(SERVED)
        names = [f"t{i}" for i in range(3)]
        for n in names:
            cluster.pod(n, [ASK, {"koordinator.sh/gpu-core": "20", "koordinator.sh/gpu-memory-ratio": "20"}])
        for n in names:
            cluster.wait_bound(n, timeout=60)
        results = {"t2": side.admit("t2")}
        side.stop_agent()  # between two pods: the trade t2 owes is in the agent's checkpoint, not made
        side.start_agent()
        side.wait_registered(SERVED)
        results["t1"] = side.admit("t1")
        results["t0"] = side.admit("t0")
        check(side, names, results)
    finally:
        side.close()


def test_pods_that_differ_are_refused_with_the_agents_reason(cluster: Cluster, tmp_path: Path) -> None:
    """Same ask, different containers: the agent cannot tell them apart and refuses; kubelet fails the
    pod with UnexpectedAdmissionError and the agent's message (what the pod's event shows)."""
    side = NodeSide(cluster, tmp_path, "differ-1", gpus=2)
    try:
        side.start(SERVED)
        cluster.pod("a", ASK)
        cluster.pod("b", [ASK, {}], names=["c0", "sidecar"])
        for n in ("a", "b"):
            cluster.wait_bound(n, timeout=60)
        result = side.admit("a")
        assert not result["admitted"] and result["reason"] == "UnexpectedAdmissionError", result
        assert "ambiguous Allocate" in result["message"] and "refusing" in result["message"], result
        assert side.admit("b")["admitted"]  # a is Failed now: b is the only candidate
    finally:
        side.close()
