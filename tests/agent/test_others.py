"""RDMA and FPGA devices read from the agent's ``--devices`` file (:mod:`devshare.agent.others`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.agent.inventory import OtherDevice
from devshare.agent.others import load_other_devices, parse_other_devices
from devshare.model.errors import InvalidDevice, InvalidInput


def test_a_file_lists_rdma_and_fpga_with_defaults_filled_in(tmp_path: Path) -> None:
    f = tmp_path / "devices.yaml"
    f.write_text("rdma:\n- id: mlx5_0\n  paths: [/dev/infiniband/uverbs0]\n- {id: mlx5_1, minor: 4, health: false}\n"
                 "fpga:\n- xilinx-0000:3b:00.0\n")
    assert load_other_devices(f) == (
        OtherDevice(type="rdma", minor=0, id="mlx5_0", healthy=True, paths=("/dev/infiniband/uverbs0",)),
        OtherDevice(type="rdma", minor=4, id="mlx5_1", healthy=False),
        OtherDevice(type="fpga", minor=0, id="xilinx-0000:3b:00.0"),
    )


@pytest.mark.parametrize("data", [None, {}, {"rdma": None, "fpga": []}, {"gpus": 4, "memory": "16Gi"}])
def test_no_rdma_or_fpga_list_means_no_devices(data: Any) -> None:
    assert parse_other_devices(data, source="f.yaml") == ()


@pytest.mark.parametrize(("data", "where", "message"), [
    (["mlx5_0"], "f.yaml", "must be a mapping with rdma and/or fpga lists"),
    ({"rdma": "mlx5_0"}, "f.yaml: rdma", "rdma must be a list of devices"),
    ({"fpga": [7]}, "f.yaml: fpga[0]", "each device must be a mapping with at least an id"),
    ({"rdma": [{"minor": 0}]}, "f.yaml: rdma[0]", "id is missing (e.g. mlx5_0)"),
    ({"rdma": [{"id": ""}]}, "f.yaml: rdma[0]", "id is missing"),
    ({"rdma": [{"id": "a", "minor": -1}]}, "f.yaml: rdma[0]", "minor must be an integer >= 0, got -1"),
    ({"rdma": [{"id": "a", "minor": True}]}, "f.yaml: rdma[0]", "minor must be an integer >= 0, got True"),
    ({"rdma": [{"id": "a", "minor": "0"}]}, "f.yaml: rdma[0]", "minor must be an integer >= 0, got '0'"),
    ({"rdma": ["a", {"id": "b", "minor": 0}]}, "f.yaml: rdma[1]", "rdma b (minor 0) is listed twice"),
    ({"fpga": ["a", {"id": "a", "minor": 5}]}, "f.yaml: fpga[1]", "fpga a (minor 5) is listed twice"),
    ({"rdma": [{"id": "a", "paths": "/dev/x"}]}, "f.yaml: rdma[0]", "paths must be a list of absolute"),
    ({"rdma": [{"id": "a", "paths": ["dev/x"]}]}, "f.yaml: rdma[0]", "paths must be a list of absolute"),
    ({"rdma": [{"id": "a", "health": "yes"}]}, "f.yaml: rdma[0]", "health must be true or false, got 'yes'"),
])
def test_bad_entries_name_the_file_the_list_and_the_position(data: Any, where: str, message: str) -> None:
    with pytest.raises(InvalidDevice) as e:
        parse_other_devices(data, source="f.yaml")
    assert e.value.field == where
    assert message in e.value.message


def test_the_same_id_may_appear_once_per_type() -> None:
    got = parse_other_devices({"rdma": ["x"], "fpga": ["x"]}, source="f")
    assert [(d.type, d.id, d.minor) for d in got] == [("rdma", "x", 0), ("fpga", "x", 0)]


def test_a_yaml_error_names_the_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "devices.yaml"
    f.write_text("rdma:\n- {id: mlx5_0\n")
    with pytest.raises(InvalidInput, match=rf"^{f}, line \d+, column \d+: not valid YAML"):
        load_other_devices(f)


@settings(deadline=None)  # no test depends on machine speed
@given(st.lists(st.sampled_from(["rdma", "fpga"]), max_size=12))
def test_defaulted_minors_are_positions_and_unique_per_type(types: list[str]) -> None:
    data: dict[str, list[str]] = {}
    for i, t in enumerate(types):
        data.setdefault(t, []).append(f"{t}-{i}")
    got = parse_other_devices(data, source="f")
    assert len(got) == len(types)
    for t in ("rdma", "fpga"):
        mine = [d for d in got if d.type == t]
        assert [d.minor for d in mine] == list(range(len(mine)))
        assert [d.id for d in mine] == data.get(t, [])


def test_a_binary_file_is_named_not_a_stack_trace(tmp_path: Path) -> None:
    f = tmp_path / "devices.bin"
    f.write_bytes(b"\x7fELF\x02\x01\x01\x00\xd0\xff\xfe")
    with pytest.raises(InvalidInput) as e:
        load_other_devices(f)
    assert str(e.value) == f"{f}: not a text file: expected YAML or JSON with rdma and/or fpga lists"
