"""CDI specs for prepared claims (:mod:`devshare.agent.dra.cdi`): one file per claim, one CDI device per
request with its environment and device nodes, written whole or not at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.agent.dra.cdi import CDI_VERSION, KIND, CdiSpecs, device_name
from devshare.agent.envs import ContainerDevices


def test_a_spec_holds_one_device_per_request_and_the_ids_name_them(tmp_path: Path) -> None:
    cdi = CdiSpecs(tmp_path / "cdi")  # made on the first write
    ids = cdi.write("uid-1", {
        "gpu": ContainerDevices(envs={"NVIDIA_VISIBLE_DEVICES": "GPU-0", "CUDA_DEVICE_SM_LIMIT": "30"}),
        "nic": ContainerDevices(envs={"DEVSHARE_RDMA_DEVICES": "mlx5_0"}, device_files=("/dev/infiniband/uverbs0",)),
    })
    assert ids == {"gpu": f"{KIND}=uid-1-gpu", "nic": f"{KIND}=uid-1-nic"}
    path = cdi.path("uid-1")
    assert path == tmp_path / "cdi" / "gpu.devshare.io-claim_uid-1.json"
    assert json.loads(path.read_text()) == {
        "cdiVersion": CDI_VERSION, "kind": KIND, "devices": [
            {"name": "uid-1-gpu", "containerEdits": {"env": ["CUDA_DEVICE_SM_LIMIT=30",
                                                             "NVIDIA_VISIBLE_DEVICES=GPU-0"]}},
            {"name": "uid-1-nic", "containerEdits": {"env": ["DEVSHARE_RDMA_DEVICES=mlx5_0"],
                                                     "deviceNodes": [{"path": "/dev/infiniband/uverbs0"}]}},
        ]}
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


def test_writing_again_replaces_the_spec_and_removing_is_idempotent(tmp_path: Path) -> None:
    cdi = CdiSpecs(tmp_path)
    cdi.write("u", {"a": ContainerDevices(envs={"X": "1"})})
    cdi.write("u", {"b": ContainerDevices(envs={"X": "2"})})
    assert [d["name"] for d in json.loads(cdi.path("u").read_text())["devices"]] == ["u-b"]
    cdi.remove("u")
    assert not cdi.path("u").exists()
    cdi.remove("u")  # kubelet retries an unprepare: no error


def test_a_failed_write_leaves_the_old_spec_and_no_temporary_file(tmp_path: Path) -> None:
    cdi = CdiSpecs(tmp_path)
    cdi.write("u", {"a": ContainerDevices(envs={"X": "1"})})
    before = cdi.path("u").read_text()
    unserializable = ContainerDevices(envs={"X": "2"}, device_files=(object(),))  # type: ignore[arg-type]
    with pytest.raises(TypeError):  # fails half-way through the JSON
        cdi.write("u", {"a": unserializable})
    assert cdi.path("u").read_text() == before
    assert [p.name for p in tmp_path.iterdir()] == [cdi.path("u").name]


@settings(deadline=None)  # no test depends on machine speed
@given(st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30))
def test_names_and_file_names_carry_only_characters_cdi_allows(uid: str, request: str) -> None:
    name = device_name(uid, request)
    assert name and all(c.isascii() and (c.isalnum() or c in "_.:-") for c in name)
    file_name = CdiSpecs(Path("/var/run/cdi")).path(uid).name
    assert "/" not in file_name and file_name.endswith(".json")
