"""RDMA and FPGA devices, from a configuration file (no discovery library is needed for them).

The file (YAML or JSON) lists devices per type::

    rdma:
    - id: mlx5_0                 # required, unique: what the Device object and the grants carry
      minor: 0                   # optional, defaults to the position in the list
      paths: [/dev/infiniband/uverbs0]   # device files given to a container holding it
      health: true               # optional
    fpga:
    - id: xilinx-0000:3b:00.0
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from devshare.agent.inventory import OtherDevice
from devshare.model.errors import InvalidDevice, InvalidInput, yaml_error

OTHER_TYPES = ("rdma", "fpga")


def parse_other_devices(data: Any, *, source: str) -> tuple[OtherDevice, ...]:
    """The RDMA/FPGA devices listed in ``data`` (a mapping with ``rdma`` and/or ``fpga`` lists)."""
    if data is None:
        return ()
    if not isinstance(data, dict):
        raise InvalidDevice("must be a mapping with rdma and/or fpga lists", field=source)
    out: list[OtherDevice] = []
    for dtype in OTHER_TYPES:
        items = data.get(dtype) or []
        if not isinstance(items, list):
            raise InvalidDevice(f"{dtype} must be a list of devices", field=f"{source}: {dtype}")
        minors: set[int] = set()
        ids: set[str] = set()
        for i, item in enumerate(items):
            where = f"{source}: {dtype}[{i}]"
            if isinstance(item, str):
                item = {"id": item}
            if not isinstance(item, dict):
                raise InvalidDevice("each device must be a mapping with at least an id", field=where)
            dev_id = item.get("id")
            if not isinstance(dev_id, str) or not dev_id:
                raise InvalidDevice("id is missing (e.g. mlx5_0)", field=where)
            minor = item.get("minor", i)
            if isinstance(minor, bool) or not isinstance(minor, int) or minor < 0:
                raise InvalidDevice(f"minor must be an integer >= 0, got {minor!r}", field=where)
            if minor in minors or dev_id in ids:
                raise InvalidDevice(f"{dtype} {dev_id} (minor {minor}) is listed twice", field=where)
            minors.add(minor)
            ids.add(dev_id)
            paths = item.get("paths") or []
            if not isinstance(paths, list) or not all(isinstance(p, str) and p.startswith("/") for p in paths):
                raise InvalidDevice("paths must be a list of absolute device file paths", field=where)
            health = item.get("health", True)
            if not isinstance(health, bool):
                raise InvalidDevice(f"health must be true or false, got {health!r}", field=where)
            out.append(OtherDevice(type=dtype, minor=minor, id=dev_id, healthy=health, paths=tuple(paths)))
    return tuple(out)


def load_other_devices(path: str | Path) -> tuple[OtherDevice, ...]:
    """Read the RDMA/FPGA configuration file."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise yaml_error(e, p) from None
    except UnicodeDecodeError:
        raise InvalidInput("not a text file: expected YAML or JSON with rdma and/or fpga lists", field=str(p)) from None
    return parse_other_devices(data, source=str(p))
