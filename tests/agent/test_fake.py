"""The fake backend and the Device object the reporter builds from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devshare.agent.fake import FakeBackend, fake_uuid
from devshare.agent.reporter import Reporter
from devshare.model.device import parse_device
from devshare.model.errors import InvalidInput
from devshare.model.links import load_topology_file
from support.agent import GIB, TOPOLOGIES, write_fake

TOPOLOGY_FILES = sorted(TOPOLOGIES.glob("*.json"))


def test_topology_files_exist() -> None:
    assert len(TOPOLOGY_FILES) >= 6


@pytest.mark.parametrize("path", TOPOLOGY_FILES, ids=lambda p: p.stem)
def test_every_topology_file_is_a_valid_fake(path: Path) -> None:
    topo = load_topology_file(path)
    reporter = Reporter(FakeBackend(path, node="n1"), "n1")
    obj = reporter.build()
    nd = parse_device(obj)  # the scheduler can read what the agent publishes
    gpus = nd.of_type("gpu")
    assert [g.minor for g in gpus] == list(range(topo.gpus))
    assert all(g.health and g.memory == 16 * GIB for g in gpus)
    assert len({g.id for g in gpus}) == topo.gpus
    assert nd.gpu_bandwidth is not None
    # the published matrix is the model's (off the diagonal; a measured diagonal is kept as given)
    for i in range(topo.gpus):
        for j in range(topo.gpus):
            if i != j:
                assert nd.gpu_bandwidth[i][j] == pytest.approx(topo.matrix[i][j])


def test_gpu_list_overrides_defaults_and_unhealthy(tmp_path: Path) -> None:
    f = write_fake(tmp_path / "n.yaml", gpus=[{"minor": 0, "uuid": "GPU-a", "memory": "80Gi", "model": "H100"},
                                             {"minor": 1}], unhealthy=[1],
                   rdma=[{"id": "mlx5_0", "paths": ["/dev/infiniband/uverbs0"]}])
    inv = FakeBackend(f, node="n").discover()
    assert inv.gpus[0].uuid == "GPU-a" and inv.gpus[0].memory == 80 * GIB and inv.gpus[0].model == "H100"
    assert inv.gpus[1].uuid == fake_uuid("n", 1) and inv.gpus[1].model == "Tesla-T4"
    assert [g.healthy for g in inv.gpus] == [True, False]
    assert inv.others[0].id == "mlx5_0" and inv.others[0].paths == ("/dev/infiniband/uverbs0",)
    nd = parse_device(Reporter(FakeBackend(f, node="n"), "n").build())
    assert [(d.type, d.minor, d.health) for d in nd.devices] == [("gpu", 0, True), ("gpu", 1, False),
                                                                 ("rdma", 0, True)]


def test_same_file_same_uuids(tmp_path: Path) -> None:
    f = write_fake(tmp_path / "n.yaml")
    a = FakeBackend(f, node="n").discover()
    b = FakeBackend(f, node="n").discover()
    c = FakeBackend(f, node="other").discover()
    assert a == b
    assert {g.uuid for g in a.gpus}.isdisjoint({g.uuid for g in c.gpus})


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("gpus: many\n", "gpus must be a count"),
        ("[1, 2]\n", "must be a mapping"),
        ("gpus: 2\nmemory: lots\n", "not a Kubernetes quantity"),
        ("gpus: [{minor: 0}, {minor: 0}]\n", "listed twice"),
        ("gpus: 2\nlinks: [{a: 0, b: 5, nvlinks: 1}]\n", "out of range"),
        ("gpus: 2\nlinks: [{a: 0, b: 1, pcie: warp}]\n", "unknown PCIe level"),
        ("gpus: 2\nrdma: [{minor: 0}]\n", "id is missing"),
        ("gpus: 2\nunhealthy: two\n", "unhealthy must be a list"),
        ("gpus: [1\n", "not valid YAML"),
    ],
)
def test_bad_fake_files_say_what_is_wrong(tmp_path: Path, content: str, needle: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(content)
    with pytest.raises(InvalidInput) as e:
        FakeBackend(f)
    assert needle in str(e.value)
    assert str(f) in str(e.value)


def test_json_fake_file(tmp_path: Path) -> None:
    f = tmp_path / "n.json"
    f.write_text(json.dumps({"gpus": 2, "bandwidth_gbps": [[0, 40], [50, 0]]}))
    nd = parse_device(Reporter(FakeBackend(f, node="n"), "n").build())
    assert nd.gpu_bandwidth == ((0.0, 40.0), (40.0, 0.0))


def test_processes_of_a_fake_node(tmp_path: Path) -> None:
    from devshare.model.errors import InvalidDevice

    f = tmp_path / "n.yaml"
    f.write_text("gpus: [{minor: 0, uuid: GPU-a}, {minor: 3, uuid: GPU-d}]\n"
                 "processes: [{gpu: 3, pid: 7, memory: 1Gi, sm: 12.5}, {gpu: GPU-a, pid: 8}]\n")
    procs = FakeBackend(f, node="n").processes()
    assert [(p.uuid, p.pid, p.memory, p.sm) for p in procs] == [("GPU-d", 7, 2**30, 12.5), ("GPU-a", 8, None, None)]
    for bad, needle in [("processes: [{gpu: 1, pid: 7}]", "minor or UUID of a GPU of the file, got 1"),
                        ("processes: [{gpu: 0, pid: -1}]", "pid must be a positive integer"),
                        ("processes: [{gpu: 0, pid: 3, sm: 140}]", "sm must be a percent"),
                        ("processes: {gpu: 0}", "processes must be a list")]:
        f.write_text("gpus: 1\n" + bad + "\n")
        with pytest.raises(InvalidDevice, match=needle):
            FakeBackend(f, node="n")
