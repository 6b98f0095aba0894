"""``devshare schedule`` is a dry run of the extender: for random workloads, every pod goes where the
extender, driven over HTTP the way kube-scheduler drives it (filter, prioritize, bind to a best-scored
node), puts it, with the same devices. Both go through the engine's one assume/bind lifecycle, so
the policy learns of the pods the same way (issue 16)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from devshare.cli.main import app
from devshare.kube.memory import MemoryBackend
from devshare.server.extender.serve import build_app
from support.kubescheduler import play_kube_scheduler
from support.server import ServerThread

runner = CliRunner()
GiB = 2**30

ASKS = [
    {"koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory-ratio": "30"},
    {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": "4Gi"},
    {"koordinator.sh/gpu-core": "70", "koordinator.sh/gpu-memory-ratio": "70"},
    {"koordinator.sh/gpu-core": "20", "koordinator.sh/gpu-memory": "2Gi"},
    {"nvidia.com/gpu": "1"},
    {"nvidia.com/gpu": "2"},
    {"aliyun.com/gpu-mem": "3072"},
    {"koordinator.sh/gpu-core": "200", "koordinator.sh/gpu-memory-ratio": "200"},
    {},  # no device: kube-scheduler asks the extender about it all the same (it is of devshare's profile)
]


def node_objs(i: int, gpus: int, memory_gib: int) -> list[dict[str, Any]]:
    name = f"node-{i}"
    devices = [{"type": "gpu", "minor": m, "id": f"GPU-{name}-{m}", "health": True,
                "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": f"{memory_gib}Gi",
                              "koordinator.sh/gpu-memory-ratio": "100"}}
               for m in range(gpus)]
    return [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}},
            {"apiVersion": "devshare.io/v1alpha1", "kind": "Device", "metadata": {"name": name},
             "spec": {"devices": devices}}]


def pod_obj(i: int, limits: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": "default", "uid": f"uid-p{i}"},
            "spec": {"schedulerName": "devshare-scheduler",
                     "containers": [{"name": "main", "image": "x", "resources": {"limits": dict(limits)}}]}}


workloads = st.fixed_dictionaries({
    "nodes": st.lists(st.tuples(st.integers(1, 4), st.sampled_from([8, 16])), min_size=1, max_size=4),
    "pods": st.lists(st.sampled_from(range(len(ASKS))), min_size=1, max_size=14),
})


def dry_run(tmp: Path, cluster: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    c, p = tmp / "cluster.yaml", tmp / "pods.yaml"
    c.write_text(yaml.safe_dump_all(cluster))
    p.write_text(yaml.safe_dump_all(pods))
    res = runner.invoke(app, ["schedule", "--cluster", str(c), str(p), "-o", "json"])
    placed_all = all(pl["node"] is not None for pl in json.loads(res.stdout)["placements"])
    assert res.exit_code in ((0,) if placed_all else (1, 2)), res.output  # 1: fits nowhere; 2: invalid
    out: list[dict[str, Any]] = json.loads(res.stdout)["placements"]
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(w=workloads)
def test_schedule_places_every_pod_where_the_extender_does(tmp_path: Path, w: dict[str, Any]) -> None:
    cluster = [o for i, (gpus, mem) in enumerate(w["nodes"]) for o in node_objs(i, gpus, mem)]
    pods = [pod_obj(i, ASKS[a]) for i, a in enumerate(w["pods"])]
    predicted = dry_run(tmp_path, cluster, pods)
    node_names = [f"node-{i}" for i in range(len(w["nodes"]))]

    backend = MemoryBackend.from_objects([*cluster, *pods])
    srv = ServerThread(build_app(backend))
    try:
        play_kube_scheduler(srv, backend, pods, predicted, node_names)
    finally:
        srv.close()
