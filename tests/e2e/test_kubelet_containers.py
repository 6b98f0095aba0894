"""Pods of several containers, with init containers, admitted by kubelet's own device manager through
devshare's agent: kubelet runs the init containers first (they ask no devices: devshare gives devices
to app containers only), then each app container's resources in map order; two containers asking the
same amount are told apart by their order; a container asking nothing gets nothing; a restarted
container gets again what it got (kubelet's cache of the plugin's answer)."""

from __future__ import annotations

import json
from pathlib import Path

from e2e.conftest import Cluster
from e2e.kubelet import NodeSide, check_containers

GIB = 2**30


def test_several_containers_and_init_containers(cluster: Cluster, tmp_path: Path) -> None:
    side = NodeSide(cluster, tmp_path, "multi-1", gpus=2)
    try:
        side.start({"koordinator.sh/gpu-core": 200, "koordinator.sh/gpu-memory-ratio": 200})
        same = {"koordinator.sh/gpu-core": "40", "koordinator.sh/gpu-memory-ratio": "40"}
        other = {"koordinator.sh/gpu-core": "20", "koordinator.sh/gpu-memory": "2Gi"}
        obj = cluster.pod("multi", [same, same, other, {}], names=["a", "b", "c", "plain"], create=False)
        obj["spec"]["initContainers"] = [
            {"name": "setup", "image": "registry.k8s.io/pause:3.10"},
            {"name": "sidecar", "image": "registry.k8s.io/pause:3.10", "restartPolicy": "Always"},
        ]
        cluster.cp.kubectl("create", "-f", "-", input=json.dumps(obj))
        cluster.wait_bound("multi", timeout=60)
        result = side.admit("multi")
        assert [c["name"] for c in result["containers"]] == ["setup", "sidecar", "a", "b", "c", "plain"]
        pods = check_containers(side, ["multi"], {"multi": result}, card_memory=16 * GIB)
        alloc = json.loads(pods["multi"]["metadata"]["annotations"]["devshare.io/allocation"])
        minors = {c["name"]: [d["minor"] for d in c["devices"]] for c in alloc["containers"]}
        envs = {c["name"]: c["envs"] for c in result["containers"]}
        for name in ("a", "b"):  # the same ask: each its own devices, in container order
            assert envs[name]["NVIDIA_VISIBLE_DEVICES"] == side.uuid(minors[name][0])
        assert envs["c"]["DEVSHARE_GPU_MEMORY_LIMIT"] == str(2 * GIB)
        assert envs["plain"] == envs["setup"] == envs["sidecar"] == {}
        # a container restarts: kubelet hands it the plugin's answer again, from its cache
        again = side.kubelet.start_container(result["uid"], "b")
        assert again["envs"] == envs["b"] and again["devices"] == result["containers"][3]["devices"]
    finally:
        side.close()
