"""Per-container GPU usage on the real control plane: a pod admitted by kubelet's device manager through
devshare's agent, its container started (its ID in the pod's status, as kubelet writes it), a process of
it on its GPU (the fake backend's processes, a /proc tree for its cgroup): the agent's /metrics shows
its use beside its share, the Device's status carries it for /ui, and going over its share makes an
Event on the pod, created with the agent's own identity (deploy/agent's RBAC and node restriction)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import yaml

from e2e.cluster import free_port, wait_until
from e2e.conftest import Cluster
from e2e.kubelet import NodeSide

GIB = 2**30
CID = "ab" * 32


def _metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("devshare_container_gpu") and 'pod="use"' in line:
            name, value = line.rsplit(" ", 1)
            out[name.split("{")[0]] = float(value)
    return out


def test_usage_beside_the_share_and_an_event_over_it(cluster: Cluster, tmp_path: Path) -> None:
    side = NodeSide(cluster, tmp_path, "usage-1", gpus=1)
    port = free_port()
    proc = tmp_path / "proc"
    proc.mkdir()
    try:
        side.start({"koordinator.sh/gpu-core": 100}, agent_args=[
            "--usage-interval", "0.5", "--usage-report-interval", "1", "--metrics-port", str(port),
            "--metrics-address", "127.0.0.1", "--proc-root", str(proc)])
        cluster.pod("use", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": "4Gi"})
        cluster.wait_bound("use", timeout=60)
        result = side.admit("use")
        assert result["admitted"], result
        uid = result["uid"]
        # kubelet starts the container and writes its ID in the pod's status
        cluster.cp.write_status("pod", "use", {"phase": "Running", "containerStatuses": [{
            "name": "c0", "containerID": f"containerd://{CID}", "image": "pause", "imageID": "pause", "ready": True,
            "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}, namespace=cluster.ns)
        (proc / "4242").mkdir()
        (proc / "4242" / "cgroup").write_text(
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid.replace('-', '_')}.slice/"
            f"cri-containerd-{CID}.scope\n")
        fake = yaml.safe_load(side.fake.read_text())
        fake["processes"] = [{"gpu": 0, "pid": 4242, "memory": "3Gi", "sm": 40}]
        side.fake.write_text(yaml.safe_dump(fake))

        got = wait_until(lambda: (m := _metrics(port)).get("devshare_container_gpu_memory_used_bytes") and m,
                         timeout=30, what="the container's usage on /metrics")
        assert got["devshare_container_gpu_memory_used_bytes"] == 3 * GIB
        assert got["devshare_container_gpu_memory_allocated_bytes"] == 4 * GIB
        assert got["devshare_container_gpu_utilization_ratio"] == 0.4
        assert got["devshare_container_gpu_core_allocated_ratio"] == 0.5
        assert got["devshare_container_gpu_memory_over_share_total"] == 0

        def published() -> dict | None:  # type: ignore[type-arg]
            usage = (cluster.cp.get("device", side.node).get("status") or {}).get("usage")
            return usage if usage and usage["gpus"][0]["containers"] and \
                usage["gpus"][0]["containers"][0]["memoryUsed"] == 3 * GIB else None
        usage = wait_until(published, timeout=30, what="the usage in the Device's status")
        assert usage["gpus"][0]["containers"][0] == {
            "pod": f"{cluster.ns}/use", "container": "c0", "memoryUsed": 3 * GIB, "memoryAllocated": 4 * GIB,
            "utilization": 0.4, "coreAllocated": 0.5}

        fake["processes"][0]["memory"] = "5Gi"  # over its 4 GiB share
        side.fake.write_text(yaml.safe_dump(fake))
        event = cluster.wait_event("use", "GPUMemoryOverShare", timeout=30)
        assert event["type"] == "Warning" and event["reportingInstance"] == side.node
        assert f"container c0 uses 5.00 GiB of GPU {side.uuid(0)} (minor 0), more than its share of 4.00 GiB" \
            == event["message"]
        assert _metrics(port)["devshare_container_gpu_memory_over_share_total"] == 1
        assert side.agent.alive, side.agent.tail()
        # the node restriction: an agent reports only as its own node
        forged = {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": "use.", "namespace": cluster.ns},
                  "involvedObject": {"kind": "Pod", "name": "use", "namespace": cluster.ns}, "reason": "Forged",
                  "message": "x", "reportingComponent": "devshare-agent", "reportingInstance": "another-node",
                  "source": {"component": "devshare-agent"}}
        from e2e.test_agent import _patch

        agent_cfg = cluster.cp.token_kubeconfig("devshare-agent", on_node=side.node)
        out = _patch(agent_cfg, f"/api/v1/namespaces/{cluster.ns}/events", json.dumps(forged), method="POST")
        assert out.returncode != 0 and "may only change objects of its own node" in out.stderr, out
    finally:
        side.close()
