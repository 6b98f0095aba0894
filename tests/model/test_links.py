"""The topology file parser and the link bandwidth model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.model.errors import InvalidInput
from devshare.model.links import (
    NVLINK_GBPS,
    PCIE_GBPS,
    Link,
    TopologyFile,
    bandwidth_from_links,
    load_topology_file,
    parse_topology,
    pcie_level,
)
from support import REPO

TOPOLOGIES = REPO / "examples" / "topologies"
FILES = sorted(TOPOLOGIES.glob("*.json"))


def test_fixtures_are_present() -> None:
    assert len(FILES) >= 6, f"expected the topology fixtures under {TOPOLOGIES}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_fixture_loads_into_a_symmetric_matrix(path: Path) -> None:
    topo = load_topology_file(path)
    raw = json.loads(path.read_text())
    assert isinstance(topo, TopologyFile)
    assert topo.name == raw["name"]
    assert topo.gpus == raw["gpus"] == len(topo.matrix)
    assert all(len(row) == topo.gpus for row in topo.matrix)
    for i in range(topo.gpus):
        for j in range(topo.gpus):
            assert topo.matrix[i][j] == topo.matrix[j][i]
            assert topo.matrix[i][j] >= 0
    assert topo.expected == raw.get("expected", {})
    assert (topo.links is None) == ("links" not in raw)


def test_measured_matrix_takes_the_slower_direction() -> None:
    topo = load_topology_file(TOPOLOGIES / "seed-8gpu-bandwidth.json")
    raw = json.loads((TOPOLOGIES / "seed-8gpu-bandwidth.json").read_text())["bandwidth_gbps"]
    assert raw[0][3] == 96.41 and raw[3][0] == 96.25
    assert topo.matrix[0][3] == topo.matrix[3][0] == 96.25
    assert topo.matrix[1][4] == 4.64  # 4.64 one way, 16.81 the other
    assert topo.matrix[0][0] == 750.48  # the diagonal is kept as given


def test_link_model_on_dgx1_volta() -> None:
    m = load_topology_file(TOPOLOGIES / "dgx1-volta.json").matrix
    assert m[0][3] == 2 * NVLINK_GBPS  # two NVLinks
    assert m[0][1] == NVLINK_GBPS  # one NVLink (the PCIe switch does not add)
    assert m[0][5] == PCIE_GBPS["cross-cpu"]
    assert m[0][0] == 0.0


def test_link_model_on_nvswitch_and_pcie_only_pairs() -> None:
    hgx = load_topology_file(TOPOLOGIES / "hgx-8gpu-nvswitch.json").matrix
    assert {hgx[i][j] for i in range(8) for j in range(8) if i != j} == {18 * NVLINK_GBPS}
    rtx = load_topology_file(TOPOLOGIES / "4x-rtx8000.json").matrix
    assert rtx[0][1] == PCIE_GBPS["same-cpu"]
    assert rtx[0][2] == PCIE_GBPS["cross-cpu"]
    assert rtx[0][3] == 2 * NVLINK_GBPS


def test_pcie_levels_are_ordered_and_below_one_nvlink() -> None:
    values = list(PCIE_GBPS.values())
    assert values == sorted(values, reverse=True) and len(set(values)) == len(values)
    assert max(values) < NVLINK_GBPS


def test_pcie_level_aliases() -> None:
    assert pcie_level("PHB") == "host-bridge"
    assert pcie_level("single") == "single-switch"
    assert pcie_level("System") == "cross-cpu"
    assert pcie_level("same_cpu") == "same-cpu"
    with pytest.raises(InvalidInput, match="unknown PCIe level 'warp-drive'"):
        pcie_level("warp-drive")


def test_unlisted_pairs_are_cross_cpu_and_custom_link_speed() -> None:
    m = bandwidth_from_links(3, [Link(0, 1, nvlinks=4)], per_link_gbps=20.0)
    assert m[0][1] == m[1][0] == 80.0
    assert m[0][2] == m[1][2] == PCIE_GBPS["cross-cpu"]
    assert [m[i][i] for i in range(3)] == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("links", "message"),
    [
        ([Link(0, 3)], "GPU index 3 is out of range"),
        ([Link(-1, 0)], "GPU index -1 is out of range"),
        ([Link(1, 1)], "two different GPUs"),
        ([Link(0, 1, nvlinks=-2)], "nvlinks must be >= 0"),
        ([Link(0, 1), Link(1, 0)], "listed twice"),
        ([Link(0, 1, via="ethernet")], "via must be empty or 'nvswitch'"),
        ([Link(0, 1, pcie="moon")], "unknown PCIe level"),
    ],
)
def test_bandwidth_from_links_rejects_bad_links(links: list[Link], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        bandwidth_from_links(3, links)


levels = st.sampled_from(sorted(PCIE_GBPS))


@st.composite
def link_tables(draw: st.DrawFn) -> tuple[int, list[Link]]:
    n = draw(st.integers(2, 8))
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True))
    links = [
        Link(*(p if draw(st.booleans()) else p[::-1]), nvlinks=draw(st.integers(0, 18)), pcie=draw(levels),
             via=draw(st.sampled_from(["", "nvswitch"])))
        for p in chosen
    ]
    return n, links


@given(link_tables())
def test_link_matrix_properties(table: tuple[int, list[Link]]) -> None:
    n, links = table
    m = bandwidth_from_links(n, links)
    by_pair = {(min(x.a, x.b), max(x.a, x.b)): x for x in links}
    for i in range(n):
        assert m[i][i] == 0.0
        for j in range(i + 1, n):
            assert m[i][j] == m[j][i]
            link = by_pair.get((i, j))
            if link is not None and link.nvlinks > 0:
                assert m[i][j] == link.nvlinks * NVLINK_GBPS  # NVLink beats every PCIe pair
                assert m[i][j] > max(PCIE_GBPS.values())
            else:
                assert m[i][j] == PCIE_GBPS[link.pcie if link else "cross-cpu"]


def test_parse_a_bare_matrix_and_a_links_table() -> None:
    topo = parse_topology([[0, 5], [7, 0]], source="bare.json")
    assert topo.name == "bare" and topo.gpus == 2 and topo.matrix == [[0.0, 5.0], [5.0, 0.0]]
    assert topo.links is None and topo.expected == {}
    topo = parse_topology({"gpus": 2, "links": [{"a": 0, "b": 1, "nvlinks": 1, "pcie": "PIX"}]}, source="x")
    assert topo.links == [Link(0, 1, nvlinks=1, pcie="single-switch")]
    assert topo.matrix == [[0.0, 25.0], [25.0, 0.0]]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({}, "f.json: neither bandwidth_gbps"),
        ("text", "f.json: a topology file must be a JSON object"),
        ({"bandwidth_gbps": [[0, 1], [1]]}, r"f.json: bandwidth_gbps: must be square: row 1 has 1 values"),
        ({"bandwidth_gbps": [[0, -1], [1, 0]]}, r"bandwidth_gbps: \[0\]\[1\] must be a number >= 0"),
        ({"bandwidth_gbps": [[0, "a"], [1, 0]]}, r"\[0\]\[1\] must be a number >= 0 \(GB/s\), got 'a'"),
        ({"bandwidth_gbps": [[0, float("nan")], [1, 0]]}, r"\[0\]\[1\] must be a number"),
        ({"bandwidth_gbps": []}, "bandwidth_gbps: must be a non-empty list of rows"),
        ({"bandwidth_gbps": [[0]], "gpus": 2}, "f.json: gpus: gpus is 2 but bandwidth_gbps is 1x1"),
        ({"gpus": 0, "links": []}, "gpus must be a positive integer"),
        ({"links": []}, "f.json: gpus: gpus .* is missing"),
        ({"gpus": 2, "links": {}}, "f.json: links: must be a list"),
        ({"gpus": 2, "links": [3]}, r"f.json: links\[0\]: must be an object"),
        ({"gpus": 2, "links": [{"a": 0}]}, r"f.json: links\[0\]: b \(a GPU index\) is missing"),
        ({"gpus": 2, "links": [{"a": 0, "b": "x"}]}, r"f.json: links\[0\]: Expected `int`"),
        ({"gpus": 2, "links": [{"a": 0, "b": 2}]}, r"f.json: links\[0\]: GPU index 2 is out of range"),
        ({"gpus": 2, "links": [{"a": 0, "b": 1, "pcie": "x"}]}, r"links\[0\].pcie: unknown PCIe level"),
        ({"gpus": 2, "name": 3, "links": []}, "f.json: name: name must be a string"),
        ({"gpus": 2, "links": [], "expected": []}, "f.json: expected: expected must be an object"),
        ({"bandwidth_gbps": [[0]], "links": [{"a": 0, "b": 1}]}, r"links\[0\]: GPU index 1 is out of range"),
    ],
)
def test_parse_errors_name_the_file_and_field(data: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_topology(data, source="f.json")


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidInput, match=r"bad.json: not valid JSON: .* \(line 1, column 2\)"):
        load_topology_file(bad)
    binary = tmp_path / "blob.json"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(InvalidInput, match=r"blob\.json: not"):
        load_topology_file(binary)
    with pytest.raises(FileNotFoundError):
        load_topology_file(tmp_path / "missing.json")
