"""kubelet restarts (kubelet-harness: kubelet's own device manager, v1.37): it reads its checkpoint back,
wipes the plugin sockets and recreates its own; devshare's agent serves and registers again. The pods it
had admitted are admitted again without a call to the agent (their containers run), a restarted
container gets what kubelet's checkpoint kept of the agent's answer, and identical replicas admitted
after the restart still start with exactly their own devices. Both a clean stop and a kill."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from devshare.agent.checkpoint import read_checkpoint
from e2e.conftest import Cluster
from e2e.kubelet import NodeSide, check_containers

GIB = 2**30
ASK = {"koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory-ratio": "30"}
SERVED = {"koordinator.sh/gpu-core": 200, "koordinator.sh/gpu-memory-ratio": 200}


def test_kubelet_restarts_reload_its_checkpoint(cluster: Cluster, tmp_path: Path) -> None:
    side = NodeSide(cluster, tmp_path, "kubelet-restart-1", gpus=2)
    try:
        side.start(SERVED)
        results: dict[str, dict[str, Any]] = {}

        def batch(names: list[str]) -> None:
            for n in names:
                cluster.pod(n, ASK)
            for n in names:
                cluster.wait_bound(n, timeout=60)
            for n in reversed(names):
                results[n] = side.admit(n)
            check_containers(side, list(results), results, card_memory=16 * GIB)

        batch(["k0", "k1", "k2"])
        uids = {n: r["uid"] for n, r in results.items()}
        for kill in (False, True):
            ready = side.kubelet.restart(kill=kill)
            assert sorted(r["uid"] for r in ready["restored"]) == sorted(uids.values()), ready
            assert all(r["admitted"] for r in ready["restored"]), ready
            side.wait_registered(SERVED)  # the agent saw kubelet's new socket and registered again
            for n, r in results.items():
                for c in r["containers"]:
                    again = side.kubelet.start_container(r["uid"], c["name"])
                    assert (again["envs"], again["devices"]) == (c["envs"], c["devices"]), (n, c["name"], kill)
            # what devshare reads of the checkpoint kubelet read back and rewrote is what kubelet holds
            entries = {(e.pod_uid, e.container, e.resource): sorted(e.device_ids)
                       for e in read_checkpoint(side.kubelet.checkpoint)}
            held = {(p["uid"], c["name"], res): ids for p in side.kubelet.pods() for c in p["containers"]
                    for res, ids in c["devices"].items()}
            assert entries == held
            batch([f"k{len(results)}", f"k{len(results) + 1}"] if not kill else [f"k{len(results)}"])
            uids = {n: r["uid"] for n, r in results.items()}
        assert side.agent.alive, side.agent.tail()
    finally:
        side.close()
