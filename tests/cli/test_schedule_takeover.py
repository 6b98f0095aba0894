"""``devshare schedule --cluster`` gives the extender's answers on the clusters the peers leave behind
(issue 36): the peers' pods counted from their own annotations, their inventories read, new pods of
every dialect placed where the extender (driven as kube-scheduler drives it) places them, with the
same devices, until nothing fits any more."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from devshare.cli.main import app
from devshare.kube.memory import MemoryBackend
from devshare.server.extender.serve import RUNTIME, build_app
from support.kubescheduler import play_kube_scheduler
from support.server import ServerThread

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "peers"
runner = CliRunner()

EVERY_DIALECT = [
    {"koordinator.sh/gpu-core": "20", "koordinator.sh/gpu-memory": "4Gi"},
    {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"},
    {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "2000", "volcano.sh/vgpu-cores": "10"},
    {"volcano.sh/gpu-memory": "2048"},
    {"aliyun.com/gpu-mem": "3000"},
    {"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "20", "koordinator.sh/gpu-memory-ratio": "20"},
    {"vke.volcengine.com/mgpu-core": "25", "vke.volcengine.com/mgpu-memory": "2048"},
    {"nvidia.com/gpu": "1"},
]


def new_pods(n: int) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"new-{i}", "namespace": "default", "uid": f"uid-new-{i}"},
             "spec": {"containers": [{"name": "main", "image": "x",
                                      "resources": {"limits": dict(EVERY_DIALECT[i % len(EVERY_DIALECT)])}}]}}
            for i in range(n)]


@pytest.mark.parametrize("peer", ["hami", "koordinator", "volcano", "aliyun"])
def test_schedule_answers_as_the_extender_on_a_peers_cluster(tmp_path: Path, peer: str) -> None:
    cluster = FIXTURES / f"{peer}.yaml"
    objects = [d for d in yaml.safe_load_all(cluster.read_text()) if d]
    node_names = [d["metadata"]["name"] for d in objects if d["kind"] == "Node"]
    pods = new_pods(40)
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(pods))
    res = runner.invoke(app, ["schedule", "--cluster", str(cluster), str(tmp_path / "pods.yaml"), "-o", "json"])
    assert res.exit_code == 1, res.output  # some pods fit nowhere (the cluster is filled)
    predicted = json.loads(res.stdout)["placements"]
    assert any(p["node"] for p in predicted) and any(p["node"] is None for p in predicted), "fill the cluster"

    backend = MemoryBackend.from_objects([*objects, *pods])
    srv = ServerThread(build_app(backend))
    try:
        play_kube_scheduler(srv, backend, pods, predicted, node_names)
        # no card over 100% compute or memory, counting the peers' pods
        view = asyncio.run_coroutine_threadsafe(_inspect(srv.app[RUNTIME]), srv.loop).result(10)
        for n in view["nodes"]:
            for d in n["devices"]:
                assert d["used"]["core"] <= d["total"]["core"], (n["name"], d)
                assert d["used"].get("memory", 0) <= d["total"].get("memory", 0), (n["name"], d)
    finally:
        srv.close()


async def _inspect(runtime: Any) -> dict[str, Any]:
    return runtime.state.inspect()  # type: ignore[no-any-return]
