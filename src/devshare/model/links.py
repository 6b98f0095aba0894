"""GPU interconnect descriptions and the bandwidth model that turns them into a matrix.

A topology file (``shared/topologies/*.json``) describes a machine's GPUs in one of two ways:

- ``bandwidth_gbps``: an N x N matrix of measured bandwidths in GB/s, row i column j. Measured
  matrices are not symmetric; the bandwidth of a pair is the smaller of its two directions (a
  collective is as fast as its slower direction). The diagonal (a GPU to itself) is kept as given
  and never used by set selection.
- ``links``: per GPU pair, what NVML reports: the NVLink count (``nvlinks``), whether the NVLinks
  go through an NVSwitch (``via: "nvswitch"``), and the PCIe common-ancestor level (``pcie``).

The link model (what :func:`bandwidth_from_links` computes), in GB/s per direction:

- NVLink: ``nvlinks x 25``. One NVLink is 25 GB/s per direction on V100 (NVLink 2), A100
  (NVLink 3: 12 links, 300 GB/s per direction) and H100 (NVLink 4: 18 links, 450 GB/s per
  direction); P100's NVLink 1 is 20 GB/s, close enough for ranking. Pass ``per_link_gbps`` for
  another generation. A pair linked through an NVSwitch gets the links the GPU has to the switch
  fabric (``nvlinks`` is that count), so 18 x 25 = 450 GB/s on an HGX H100.
- PCIe, for pairs without NVLink. Peer-to-peer traffic is bounded by one x16 link (Gen3 ~16 GB/s,
  Gen4 ~32 GB/s theoretical, less measured: the seed's matrix shows 15-17 GB/s between GPUs
  without NVLink) and gets worse the higher up the tree the two GPUs meet, because each hop is
  shared with more devices and crossing the CPU interconnect (QPI/UPI) throttles or disables P2P
  (traffic then bounces through host memory). Levels, from NVML's ``nvmlGpuTopologyLevel``:

  ================== ============================== ====
  level              NVML                           GB/s
  ================== ============================== ====
  same-board         INTERNAL (two GPUs, one card)    24
  single-switch      SINGLE (one PCIe switch)         22
  multiple-switches  MULTIPLE (switch hierarchy)      20
  host-bridge        HOSTBRIDGE (same root complex)   18
  same-cpu           NODE (same NUMA node)            16
  cross-cpu          SYSTEM (across sockets)          10
  ================== ============================== ====

  Every PCIe level is below one NVLink (25), so any NVLink pair beats any PCIe-only pair, and
  the levels are strictly ordered, so a closer pair always wins. NVLink and PCIe are not added:
  NCCL routes a pair over NVLink when it has one, so the NVLink figure alone is the pair's
  bandwidth (this is also what makes the go-gpuallocator DGX-1 expectations come out).
- A pair the table does not list is taken as ``cross-cpu``, the worst case. The diagonal is 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from devshare.model.errors import InvalidInput

NVLINK_GBPS = 25.0  # one NVLink, per direction (NVLink 2/3/4)

PCIE_GBPS: dict[str, float] = {
    "same-board": 24.0,
    "single-switch": 22.0,
    "multiple-switches": 20.0,
    "host-bridge": 18.0,
    "same-cpu": 16.0,
    "cross-cpu": 10.0,
}

# other spellings of the PCIe levels (NVML names, nvidia-smi topo -m abbreviations)
PCIE_ALIASES: dict[str, str] = {
    "internal": "same-board",
    "board": "same-board",
    "single": "single-switch",
    "pix": "single-switch",
    "multiple": "multiple-switches",
    "multiple-switch": "multiple-switches",
    "multi-switch": "multiple-switches",
    "pxb": "multiple-switches",
    "hostbridge": "host-bridge",
    "phb": "host-bridge",
    "node": "same-cpu",
    "numa": "same-cpu",
    "system": "cross-cpu",
    "sys": "cross-cpu",
}

VIAS = ("", "nvswitch")


class Link(msgspec.Struct, frozen=True):
    """How two GPUs ``a`` and ``b`` are connected."""

    a: int
    b: int
    nvlinks: int = 0
    pcie: str = "cross-cpu"
    via: str = ""


class TopologyFile(msgspec.Struct):
    """A parsed topology file: ``matrix`` is symmetric, in GB/s."""

    name: str
    gpus: int
    matrix: list[list[float]]
    links: list[Link] | None
    expected: dict[str, Any]


def pcie_level(level: str, *, field: str = "pcie") -> str:
    """The canonical name of a PCIe level (accepts NVML and ``nvidia-smi topo`` spellings)."""
    key = level.strip().lower().replace("_", "-").replace(" ", "-")
    key = PCIE_ALIASES.get(key, key)
    if key not in PCIE_GBPS:
        raise InvalidInput(f"unknown PCIe level {level!r}: use one of {', '.join(PCIE_GBPS)}", field=field)
    return key


def link_bandwidth(link: Link, *, per_link_gbps: float = NVLINK_GBPS) -> float:
    """The bandwidth of one pair under the model above, in GB/s."""
    if link.nvlinks > 0:
        return link.nvlinks * per_link_gbps
    return PCIE_GBPS[pcie_level(link.pcie)]


def bandwidth_from_links(
    n: int, links: Sequence[Link], *, per_link_gbps: float = NVLINK_GBPS
) -> list[list[float]]:
    """The symmetric n x n bandwidth matrix (GB/s) of a link table; unlisted pairs are cross-cpu."""
    if n < 0:
        raise InvalidInput(f"the number of GPUs must be >= 0, got {n}", field="gpus")
    worst = PCIE_GBPS["cross-cpu"]
    matrix = [[0.0 if i == j else worst for j in range(n)] for i in range(n)]
    seen: set[tuple[int, int]] = set()
    for i, link in enumerate(links):
        field = f"links[{i}]"
        for end in (link.a, link.b):
            if not 0 <= end < n:
                raise InvalidInput(f"GPU index {end} is out of range: there are {n} GPUs (0..{n - 1})",
                                   field=field)
        if link.a == link.b:
            raise InvalidInput(f"a link needs two different GPUs, got {link.a} twice", field=field)
        if link.nvlinks < 0:
            raise InvalidInput(f"nvlinks must be >= 0, got {link.nvlinks}", field=field)
        if link.via not in VIAS:
            raise InvalidInput(f"via must be empty or 'nvswitch', got {link.via!r}", field=field)
        pair = (min(link.a, link.b), max(link.a, link.b))
        if pair in seen:
            raise InvalidInput(f"GPUs {pair[0]} and {pair[1]} are listed twice", field=field)
        seen.add(pair)
        pcie_level(link.pcie, field=f"{field}.pcie")
        bw = link_bandwidth(link, per_link_gbps=per_link_gbps)
        matrix[link.a][link.b] = matrix[link.b][link.a] = bw
    return matrix


def _number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(v) and v >= 0


def _matrix(rows: Any, *, source: str) -> list[list[float]]:
    field = f"{source}: bandwidth_gbps"
    if not isinstance(rows, list) or not rows or not all(isinstance(r, list) for r in rows):
        raise InvalidInput("must be a non-empty list of rows, e.g. [[0, 48], [48, 0]]", field=field)
    n = len(rows)
    for i, r in enumerate(rows):
        if len(r) != n:
            raise InvalidInput(f"must be square: row {i} has {len(r)} values, expected {n}", field=field)
        for j, v in enumerate(r):
            if not _number(v):
                raise InvalidInput(f"[{i}][{j}] must be a number >= 0 (GB/s), got {v!r}", field=field)
    # a pair's bandwidth is the smaller of its two directions; the diagonal stays as given
    return [[float(rows[i][j]) if i == j else float(min(rows[i][j], rows[j][i])) for j in range(n)]
            for i in range(n)]


def _links(raw: Any, *, gpus: int, source: str) -> list[Link]:
    if not isinstance(raw, list):
        raise InvalidInput("must be a list of {a, b, nvlinks, pcie, via} objects", field=f"{source}: links")
    links: list[Link] = []
    for i, item in enumerate(raw):
        field = f"{source}: links[{i}]"
        if not isinstance(item, dict):
            raise InvalidInput("must be an object like {\"a\": 0, \"b\": 1, \"nvlinks\": 2}", field=field)
        for key in ("a", "b"):
            if key not in item:
                raise InvalidInput(f"{key} (a GPU index) is missing", field=field)
        try:
            link = msgspec.convert(item, Link)
        except msgspec.ValidationError as e:
            raise InvalidInput(str(e), field=field) from None
        links.append(msgspec.structs.replace(link, pcie=pcie_level(link.pcie, field=f"{field}.pcie")))
    try:
        bandwidth_from_links(gpus, links)  # checks indices, duplicates, counts
    except InvalidInput as e:
        raise InvalidInput(e.message, field=f"{source}: {e.field}") from None
    return links


def parse_topology(data: Any, *, source: str) -> TopologyFile:
    """Parse a topology file's content (or a bare matrix); errors name ``source`` and the field."""
    if isinstance(data, list):
        data = {"bandwidth_gbps": data}
    if not isinstance(data, dict):
        raise InvalidInput("a topology file must be a JSON object with bandwidth_gbps or links", field=source)
    name = data.get("name", Path(source).stem)
    if not isinstance(name, str):
        raise InvalidInput(f"name must be a string, got {name!r}", field=f"{source}: name")
    expected = data.get("expected", {})
    if not isinstance(expected, dict):
        raise InvalidInput("expected must be an object", field=f"{source}: expected")
    gpus = data.get("gpus")
    if gpus is not None and (isinstance(gpus, bool) or not isinstance(gpus, int) or gpus <= 0):
        raise InvalidInput(f"gpus must be a positive integer, got {gpus!r}", field=f"{source}: gpus")
    links: list[Link] | None = None
    if "bandwidth_gbps" in data:
        matrix = _matrix(data["bandwidth_gbps"], source=source)
        if gpus is not None and gpus != len(matrix):
            raise InvalidInput(f"gpus is {gpus} but bandwidth_gbps is {len(matrix)}x{len(matrix)}",
                               field=f"{source}: gpus")
        if "links" in data:
            links = _links(data["links"], gpus=len(matrix), source=source)
    elif "links" in data:
        if gpus is None:
            raise InvalidInput("gpus (the number of GPUs) is missing; a links table needs it",
                               field=f"{source}: gpus")
        links = _links(data["links"], gpus=gpus, source=source)
        matrix = bandwidth_from_links(gpus, links)
    else:
        raise InvalidInput("neither bandwidth_gbps (an N x N matrix) nor links (a link table) is given",
                           field=source)
    return TopologyFile(name=name, gpus=len(matrix), matrix=matrix, links=links, expected=expected)


def load_topology_file(path: str | Path) -> TopologyFile:
    """Read and parse a topology file; bad JSON or content raises :class:`InvalidInput` naming it."""
    p = Path(path)
    try:
        data = json.loads(p.read_bytes())
    except UnicodeDecodeError:
        raise InvalidInput("not a text file: expected JSON", field=str(p)) from None
    except json.JSONDecodeError as e:
        message = f"not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})"
        raise InvalidInput(message, field=str(p)) from None
    return parse_topology(data, source=str(p))
