"""``devshare schedule``: the seeds' examples end to end, from pod YAML to the annotations."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from devshare.cli.main import app
from support import REPO
from support.schedule import node, pod

ROOT = REPO
runner = CliRunner()
GiB = 2**30


def run(tmp_path: Path, cluster: list[dict], pods: list[dict], *args: str) -> dict:
    c = tmp_path / "cluster.yaml"
    p = tmp_path / "pods.yaml"
    c.write_text(yaml.safe_dump_all(cluster))
    p.write_text(yaml.safe_dump_all(pods))
    res = runner.invoke(app, ["schedule", "--cluster", str(c), str(p), "-o", "json", *args])
    placed_all = all(pl["node"] is not None for pl in json.loads(res.stdout)["placements"])
    assert res.exit_code in ((0,) if placed_all else (1, 2)), res.output  # 1: fits nowhere; 2: invalid
    return json.loads(res.stdout)


def canonical(placement: dict) -> dict:
    return json.loads(placement["annotations"]["devshare.io/allocation"])


def test_seed001_nvidia_gpu_2_becomes_two_whole_cards(tmp_path: Path) -> None:
    out = run(tmp_path, node("n1", 4, "8Gi"), [pod("p", {"nvidia.com/gpu": "2"})])
    [pl] = out["placements"]
    devs = canonical(pl)["containers"][0]["devices"]
    assert [(d["core"], d["memoryRatio"], d["memory"]) for d in devs] == [(100, 100, 8 * GiB)] * 2
    koord = json.loads(pl["annotations"]["scheduling.koordinator.sh/device-allocated"])
    assert [g["resources"]["koordinator.sh/gpu-memory"] for g in koord["gpu"]] == ["8Gi", "8Gi"]


def test_seed001_gpu_50_becomes_core_and_ratio_then_bytes(tmp_path: Path) -> None:
    out = run(tmp_path, node("n1", 1, "8Gi"), [pod("p", {"koordinator.sh/gpu": "50"})])
    d = canonical(out["placements"][0])["containers"][0]["devices"][0]
    assert (d["core"], d["memoryRatio"], d["memory"]) == (50, 50, 4 * GiB)


def test_seed000_2_1_3_pod_on_a_four_card_node(tmp_path: Path) -> None:
    labels = {"devshare.io/multi-gpu-share": "true", "devshare.io/gpu-compute-policy": "native-burst-share"}
    p = pod("p", {"vke.volcengine.com/mgpu-core": "100", "vke.volcengine.com/mgpu-memory": "2048"},
            {"vke.volcengine.com/mgpu-core": "100"},
            {"vke.volcengine.com/mgpu-core": "99", "vke.volcengine.com/mgpu-memory": "3072"},
            annotations={"vke.volcengine.com/container-multiple-gpu": "2,1,3"})
    out = run(tmp_path, node("n1", 4, labels=labels), [p])
    [pl] = out["placements"]
    assert pl["node"] == "n1"
    idx = {k: v for k, v in pl["annotations"].items() if k.startswith("vke.volcengine.com/gpu-index-container-")}
    cards = {k.rsplit("-", 1)[1]: sorted(int(x) for x in v.split(",")) for k, v in idx.items()}
    assert [len(cards["c0"]), len(cards["c1"]), len(cards["c2"])] == [2, 1, 3]
    assert cards["c1"][0] not in cards["c0"] + cards["c2"]
    assert pl["annotations"]["vke.volcengine.com/assumed"] == "true"


def test_seed002_aliyun_binpacks_on_the_card_with_least_free_memory(tmp_path: Path) -> None:
    cluster = node("n1", 4, "16276Mi")
    taken = [("a", 0, 16276 - 12207), ("b", 1, 16276 - 8138), ("c", 2, 16276 - 4069)]
    for name, minor, mib in taken:
        alloc = {"node": "n1", "containers": [{"name": "c0", "devices": [
            {"type": "gpu", "minor": minor, "id": f"GPU-n1-{minor}", "core": 0, "memory": mib * 2**20,
             "memoryRatio": 0}]}]}
        bound = pod(name, {"aliyun.com/gpu-mem": str(mib)},
                    annotations={"devshare.io/allocation": json.dumps(alloc)})
        bound["spec"]["nodeName"] = "n1"
        cluster.append(bound)
    out = run(tmp_path, cluster, [pod("p", {"aliyun.com/gpu-mem": "8138"})])
    ann = out["placements"][0]["annotations"]
    assert ann["ALIYUN_COM_GPU_MEM_IDX"] == "1"
    assert ann["ALIYUN_COM_GPU_MEM_POD"] == "8138"
    assert ann["ALIYUN_COM_GPU_MEM_ASSIGNED"] == "false"


def test_pods_are_placed_in_order_and_unplaceable_ones_say_why(tmp_path: Path) -> None:
    out = run(tmp_path, node("n1", 1), [pod("a", {"koordinator.sh/gpu": "60"}), pod("b", {"koordinator.sh/gpu": "60"})])
    a, b = out["placements"]
    assert a["node"] == "n1" and b["node"] is None
    assert "gpu 0: 40% compute free, 60% asked" in b["reason"]


def test_an_invalid_pod_gets_its_reason_and_the_rest_still_run(tmp_path: Path) -> None:
    bad = pod("bad", {"vke.volcengine.com/mgpu-core": "120"})
    out = run(tmp_path, node("n1", 2), [bad, pod("ok", {"nvidia.com/gpu": "1"})])
    first, second = out["placements"]
    assert first["node"] is None and "multiple of 100" in first["reason"]
    assert second["node"] == "n1"


def test_bad_files_are_one_clear_line(tmp_path: Path) -> None:
    res = runner.invoke(app, ["schedule", "--cluster", str(tmp_path / "none.yaml"), str(tmp_path / "p.yaml")])
    assert res.exit_code == 2 and "error:" in res.output and "Traceback" not in res.output
    (tmp_path / "c.yaml").write_text(yaml.safe_dump_all(node("n1", 1)))
    (tmp_path / "p.yaml").write_text("kind: Pod\nmetadata: [unclosed\n")
    res = runner.invoke(app, ["schedule", "--cluster", str(tmp_path / "c.yaml"), str(tmp_path / "p.yaml")])
    assert res.exit_code == 2 and "YAML" in res.output
    (tmp_path / "p.yaml").write_text("kind: Service\nmetadata: {name: s}\n")
    res = runner.invoke(app, ["schedule", "--cluster", str(tmp_path / "c.yaml"), str(tmp_path / "p.yaml")])
    assert res.exit_code == 2 and "expected a Pod" in res.output


def test_example_files_schedule(tmp_path: Path) -> None:
    res = runner.invoke(app, ["schedule", "--cluster", str(ROOT / "examples/cluster.yaml"),
                              str(ROOT / "examples/pods.yaml"), "-o", "yaml"])
    assert res.exit_code == 1, res.output  # two of its pods fit nowhere, on purpose
    data = yaml.safe_load(res.stdout)
    placed = {p["pod"]: p["node"] for p in data["placements"]}
    assert placed["team-c/mgpu-2-1-3"] == "gpu-node-1"
    assert placed["team-d/too-big"] is None


def test_gang_group_is_placed_all_together(tmp_path: Path) -> None:
    members = []
    for i in range(2):
        p = pod(f"w{i}", {"nvidia.com/gpu": "2"},
                annotations={"gang.scheduling.koordinator.sh/name": "job",
                             "gang.scheduling.koordinator.sh/min-available": "2"})
        p["metadata"]["labels"] = {"gputopology.scheduling.koordinator.sh/name": "job",
                                   "gputopology.scheduling.koordinator.sh/replica": "2"}
        members.append(p)
    out = run(tmp_path, node("n1", 4), members)
    assert [p["node"] for p in out["placements"]] == ["n1", "n1"]
    topo = [json.loads(p["annotations"]["topology.scheduling.koordinator.sh/gpu"]) for p in out["placements"]]
    assert topo[0]["visibleGPUs"] == topo[1]["visibleGPUs"] == ["0", "1", "2", "3"]
    # a gang that cannot complete places nobody
    out = run(tmp_path, node("n1", 3), members)
    assert [p["node"] for p in out["placements"]] == [None, None]


def test_exit_codes(tmp_path: Path) -> None:
    """Issue 40: 0 every pod placed, 1 some fit nowhere, 2 bad input: every pod invalid exited 0."""
    c, p = tmp_path / "cluster.yaml", tmp_path / "pods.yaml"
    c.write_text(yaml.safe_dump_all(node("n1", 1, "8Gi")))

    def code(*pods: dict) -> int:
        p.write_text(yaml.safe_dump_all(list(pods)))
        res = runner.invoke(app, ["schedule", "--cluster", str(c), str(p)])
        assert len(json.loads(res.stdout)["placements"]) == len(pods)  # every placement printed, whatever the code
        return res.exit_code

    fits = pod("fits", {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu-memory": "1Gi"})
    too_big = pod("too-big", {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "64Gi"})
    invalid = pod("invalid", {"koordinator.sh/gpu-core": "150"})
    assert code(fits) == 0
    assert code(fits, too_big) == 1
    assert code(invalid) == 2
    assert code(invalid, pod("invalid-2", {"nvidia.com/gpu": "-1"})) == 2
    assert code(fits, too_big, invalid) == 2  # bad input wins
