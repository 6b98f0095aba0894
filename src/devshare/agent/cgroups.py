"""Which pod and container a process belongs to, from its cgroup (``/proc/<pid>/cgroup``).

kubelet puts every container in a cgroup under the pod's, under ``kubepods``; the layout depends on
the cgroup version and on kubelet's cgroup driver, and the last part names the container in the
runtime's own spelling:

- cgroup v2, systemd driver (most current nodes)::

    0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1f0e..._4b2a.slice/cri-containerd-<id>.scope

- cgroup v1, cgroupfs driver (one line per hierarchy; any line under ``kubepods`` will do)::

    11:memory:/kubepods/besteffort/pod1f0e...-4b2a/<id>

- runtimes: containerd (``cri-containerd-<id>.scope``, or the bare id with cgroupfs), CRI-O
  (``crio-<id>.scope`` / ``crio-<id>``; ``crio-conmon-<id>`` is its monitor, not the container),
  Docker through cri-dockerd (``docker-<id>.scope`` / the bare id).

The pod UID is spelt with ``_`` under systemd and ``-`` under cgroupfs; static pods have a 32-digit
hash for a UID. Inside a container with its own cgroup namespace (the default with cgroup v2) the
paths of other pods' processes are relative (``0::/../../kubepods-...``): the parts are matched
wherever they appear. A process inside a container may sit in a sub-cgroup of it (its own systemd,
a nested runtime): the first container part below the pod's is the container.

The container ID found here is the one the API shows in ``status.containerStatuses[].containerID``
(``containerd://<id>``, ``cri-o://<id>``, ``docker://<id>``) once the scheme is removed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import msgspec

_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})"
                  r"(?:\.slice)?$")
_CONTAINER = re.compile(r"^(?:cri-containerd-|crio-|docker-|cri-dockerd-|containerd-|libpod-)?([0-9a-f]{64})"
                        r"(?:\.scope)?$")


class CgroupRef(msgspec.Struct, frozen=True, kw_only=True):
    """Where a process sits: its pod's UID and its container's ID ("" when the path names none)."""

    pod_uid: str
    container_id: str = ""


def _from_path(path: str) -> CgroupRef | None:
    parts = [p for p in path.split("/") if p and p != ".."]
    for i, part in enumerate(parts):
        m = _POD.search(part)
        if m is None:
            continue
        uid = m.group(1).replace("_", "-")
        for below in parts[i + 1:]:
            if below.startswith("crio-conmon-"):
                return CgroupRef(pod_uid=uid)  # CRI-O's monitor process, not a container's
            c = _CONTAINER.match(below)
            if c is not None:
                return CgroupRef(pod_uid=uid, container_id=c.group(1))
        return CgroupRef(pod_uid=uid)
    return None


def parse_cgroup(text: str) -> CgroupRef | None:
    """The pod and container a ``/proc/<pid>/cgroup`` content names; None when it names no pod (a
    process of the host, or of something kubelet did not start). The cgroup v2 line wins; else the
    first v1 line that names a pod."""
    lines = [line.split(":", 2) for line in text.splitlines() if line.count(":") >= 2]
    ordered = [x for x in lines if x[0] == "0" and x[1] == ""] + [x for x in lines if not (x[0] == "0" and x[1] == "")]
    for _, _, path in ordered:
        ref = _from_path(path.strip())
        if ref is not None:
            return ref
    return None


def read_cgroup(proc: Path, pid: int) -> CgroupRef | None:
    """The pod and container of process ``pid`` (``proc`` is the host's ``/proc``). Raises OSError when
    the file cannot be read (the process ended, or ``proc`` is not the host's). One open and read (a
    third of what ``Path.read_text`` costs: the reader does this for every GPU process, every round)."""
    fd = os.open(f"{proc}/{pid}/cgroup", os.O_RDONLY)
    try:
        data = os.read(fd, 1 << 16)
    finally:
        os.close(fd)
    return parse_cgroup(data.decode(errors="replace"))


def container_id(status_id: str) -> str:
    """``containerd://<id>`` (a container status's ``containerID``) -> ``<id>``."""
    return status_id.split("://", 1)[-1]
