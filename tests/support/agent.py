"""Builders for the agent tests: fake node descriptions and pods carrying devshare allocations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from devshare.model import names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.codecs import encode_allocation
from support import REPO

TOPOLOGIES = REPO / "examples" / "topologies"
GIB = 2**30


def write_fake(path: Path, **fields: Any) -> Path:
    data: dict[str, Any] = {"gpus": 4, "memory": "16Gi", "model": "Tesla-T4"}
    data.update(fields)
    path.write_text(yaml.safe_dump(data))
    return path


def gpu(minor: int, uuid: str, core: int = 1000, memory: int = 0, ratio: int = 0) -> DeviceGrant:
    return DeviceGrant(type=names.GPU, minor=minor, id=uuid, core_milli=core, memory=memory,
                       memory_ratio_milli=ratio)


def pod(
    name: str,
    node: str,
    containers: list[tuple[str, dict[str, Any], list[DeviceGrant]]],
    *,
    uid: str | None = None,
    init: list[tuple[str, dict[str, Any], list[DeviceGrant]]] = (),  # type: ignore[assignment]
    annotations: dict[str, str] | None = None,
    phase: str = "Pending",
    namespace: str = "default",
) -> dict[str, Any]:
    """A pod bound to ``node`` with per container (name, limits, grants) and its devshare allocation."""
    alloc = PodAllocation(
        node=node,
        containers=tuple(ContainerAllocation(name=c, devices=tuple(g)) for c, _, g in [*init, *containers]),
    )
    ann = {names.ALLOCATION: encode_allocation(alloc)}
    ann.update(annotations or {})

    def spec(items: Any) -> list[dict[str, Any]]:
        return [{"name": c, "image": "cuda", "resources": {"limits": {k: str(v) for k, v in lim.items()}}}
                for c, lim, _ in items]

    body: dict[str, Any] = {"nodeName": node, "containers": spec(containers)}
    if init:
        body["initContainers"] = spec(init)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}", "annotations": ann},
        "spec": body,
        "status": {"phase": phase},
    }
