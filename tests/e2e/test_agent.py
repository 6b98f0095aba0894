"""The node agent's reporter, running with the identity of deploy/agent's ServiceAccount, creates its
node's Device and advertises the node's extended resources on the Node's status."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from e2e.cluster import DEVSHARE, wait_until
from e2e.conftest import Cluster


def test_reporter_creates_device_and_node_status_with_its_own_identity(cluster: Cluster, tmp_path: Path) -> None:
    node = cluster.node("agent-1", gpus=0)
    cluster.cp.kubectl("delete", "device", node)  # the agent makes it
    fake = tmp_path / "node.yaml"
    fake.write_text(yaml.safe_dump({"model": "Tesla-V100-SXM2-16GB", "memory": "16Gi", "gpus": 4}))
    cfg = cluster.cp.token_kubeconfig("devshare-agent")
    proc = cluster.cp.spawn("agent", [*DEVSHARE, "agent", "report", "--fake", str(fake), "--node", node,
                                      "--interval", "1"],
                            env={**os.environ, "KUBECONFIG": str(cfg), "PYTHONUNBUFFERED": "1"})
    try:
        dev = wait_until(lambda: cluster.cp.kubectl("get", "device", node, "-o", "yaml", check=False).stdout,
                         timeout=60, what="the agent's Device")
        device = yaml.safe_load(dev)
        gpus = [d for d in device["spec"]["devices"] if d["type"] == "gpu"]
        assert [d["minor"] for d in gpus] == [0, 1, 2, 3]
        assert all(d["resources"]["koordinator.sh/gpu-memory"] == "16Gi" for d in gpus)

        def advertised() -> dict[str, str] | None:
            alloc = cluster.cp.get("node", node)["status"]["allocatable"]
            return alloc if "vke.volcengine.com/mgpu-memory" in alloc else None
        alloc = wait_until(advertised, timeout=60, what="the node's extended resources")
        assert alloc["vke.volcengine.com/mgpu-memory"] == str(4 * 16 * 1024)  # MiB of the four cards
        assert proc.alive, proc.tail()
    finally:
        proc.stop()
