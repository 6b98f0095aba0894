"""What a pod asks of its node and which resource names it asks, read without the dialects' rules:

- :func:`node_requests`: the CPU and memory kube-scheduler counts for the node;
- :func:`requests_devices`, :func:`asked_resource_names`, :func:`unread_device_asks`: quick looks at
  the resource names alone (never raising), for letting every other pod through untouched."""

from __future__ import annotations

import math
from typing import Any

from devshare.model import dialects, prefixes
from devshare.model.errors import InvalidInput
from devshare.model.problems import Problems
from devshare.model.quantity import parse_quantity, shown
from devshare.model.request import (
    MAX_CPU_MILLI,
    MAX_MEMORY,
)

ZERO = ("0", 0)  # a resource asked with these is not asked


def requests_devices(pod: Any) -> bool:
    """Does ``pod`` ask any container (init containers included) for a managed device? A quick
    look at resource names only, for letting every other pod through untouched."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    if not isinstance(spec, dict):
        return False
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if not isinstance(containers, list):
            continue
        for c in containers:
            res = c.get("resources") if isinstance(c, dict) else None
            if not isinstance(res, dict):
                continue
            for part in ("requests", "limits"):
                d = res.get(part)
                if isinstance(d, dict):
                    for k, v in d.items():
                        # a name a dialect reads, or one under a dialect's prefix to refuse (a misspelling)
                        if isinstance(k, str) and v not in ZERO and prefixes.judged(k):
                            return True
    return False


def asked_resource_names(pod: Any) -> list[str]:
    """Every resource name a container of ``pod`` (init containers too) asks with a non-zero value,
    in order, once each. Names only; never raises."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    out: list[str] = []
    if not isinstance(spec, dict):
        return out
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        for c in containers if isinstance(containers, list) else []:
            res = c.get("resources") if isinstance(c, dict) else None
            for part in ("requests", "limits"):
                d = res.get(part) if isinstance(res, dict) else None
                for k, v in d.items() if isinstance(d, dict) else ():
                    if isinstance(k, str) and v not in ZERO and k not in out:
                        out.append(k)
    return out


def unread_device_asks(pod: Any, device_types: frozenset[str]) -> list[tuple[str, str]]:
    """(resource name, device type) for every name a container of ``pod`` asks (non-zero) that no
    dialect reads but that names one of ``device_types`` (``koordinator.sh/npu``, ``example.com/npu-core``
    for ``npu``): a type with Device objects and no dialect or configuration, which would otherwise be
    placed reserving nothing. Names only; never raises."""
    if not device_types:
        return []
    known = dialects.resource_names()
    out: list[tuple[str, str]] = []
    for k in asked_resource_names(pod):
        if k in known or "/" not in k:
            continue
        leaf = k.rsplit("/", 1)[1].lower()
        dtype = next((t for t in sorted(device_types) if leaf == t or leaf.startswith(t + "-")), None)
        if dtype is not None:
            out.append((k, dtype))
    return out


def container_resources(container: dict[str, Any], where: str, problems: Problems) -> dict[str, Any]:
    """requests over limits: each name's request, or its limit when it has no request."""
    res = container.get("resources")
    if res is None:
        return {}
    if not isinstance(res, dict):
        problems.add(where, "resources must be a mapping with requests and limits")
        return {}
    merged: dict[str, Any] = {}
    for part in ("limits", "requests"):
        d = res.get(part)
        if d is None:
            continue
        if not isinstance(d, dict):
            problems.add(where, f"resources.{part} must be a mapping of resource names to quantities")
            continue
        merged.update({str(k): v for k, v in d.items()})
    return merged


def _node_resources(resources: dict[str, Any], where: str, problems: Problems) -> tuple[int, int]:
    out = [0, 0]
    for i, (name, scale, top, most) in enumerate((("cpu", 1000, MAX_CPU_MILLI, f"{MAX_CPU_MILLI // 1000} cores"),
                                                  ("memory", 1, MAX_MEMORY, "64Ti"))):
        if name not in resources:
            continue
        try:
            q = parse_quantity(resources[name])
        except InvalidInput as e:
            problems.add(where, f"{name}: {e.message}")
            continue
        if q < 0:
            problems.add(where, f"{name} is negative; ask 0 or more")
            continue
        if q * scale > top:
            problems.add(where, f"{name} is {shown(resources[name])}, far beyond any node: it must be at most {most}")
            continue
        out[i] = math.ceil(q * scale)
    return out[0], out[1]


def node_requests(spec: dict[str, Any], problems: Problems) -> tuple[int, int]:
    """The CPU (milli) and memory (bytes) the pod takes of its node, as kube-scheduler counts them
    (component-helpers' ``resource.PodRequests``): the app containers summed, with each restartable
    init container (a sidecar, ``restartPolicy: Always``) added to them; at least each ordinary init
    container plus the sidecars started before it; pod-level ``spec.resources`` in place of all of it
    where given; plus ``spec.overhead``."""
    def each(key: str) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
        raw = spec.get(key)
        out = []
        for i, c in enumerate(raw if isinstance(raw, list) else []):
            if isinstance(c, dict):
                where = f"{'init container' if key == 'initContainers' else 'container'} {c.get('name', i)!r}"
                # the shape of resources is judged where containers are read (_container_rows,
                # _init_containers); the quantities here
                out.append((where, c, container_resources(c, where, Problems())))
        return out

    cpu = memory = 0
    for where, _, resources in each("containers"):
        c_cpu, c_mem = _node_resources(resources, where, problems)
        cpu, memory = cpu + c_cpu, memory + c_mem
    side_cpu = side_mem = init_cpu = init_mem = 0
    for where, c, resources in each("initContainers"):
        c_cpu, c_mem = _node_resources(resources, where, problems)
        if c.get("restartPolicy") == "Always":
            cpu, memory = cpu + c_cpu, memory + c_mem
            side_cpu, side_mem = side_cpu + c_cpu, side_mem + c_mem
            c_cpu, c_mem = side_cpu, side_mem
        else:
            c_cpu, c_mem = c_cpu + side_cpu, c_mem + side_mem
        init_cpu, init_mem = max(init_cpu, c_cpu), max(init_mem, c_mem)
    cpu, memory = max(cpu, init_cpu), max(memory, init_mem)
    pod_level = spec.get("resources")
    if isinstance(pod_level, dict) and isinstance(pod_level.get("requests"), dict):
        p_cpu, p_mem = _node_resources(pod_level["requests"], "spec.resources", problems)
        cpu = p_cpu if "cpu" in pod_level["requests"] else cpu
        memory = p_mem if "memory" in pod_level["requests"] else memory
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        o_cpu, o_mem = _node_resources(overhead, "spec.overhead", problems)
        cpu, memory = cpu + o_cpu, memory + o_mem
    return cpu, memory


def pod_node_requests(pod: Any) -> tuple[int, int]:
    """:func:`node_requests` of a pod object as the API server has it (it validated the quantities);
    never raises: what does not read counts as 0 (such a pod never passed the API server)."""
    spec = pod.get("spec") if isinstance(pod, dict) else None
    return node_requests(spec, Problems()) if isinstance(spec, dict) else (0, 0)
