"""A process's pod and container from its cgroup: cgroup v1 and v2, systemd and cgroupfs drivers,
containerd, CRI-O and Docker ids, relative paths under a cgroup namespace."""

from __future__ import annotations

from pathlib import Path

import pytest

from devshare.agent.cgroups import CgroupRef, container_id, parse_cgroup, read_cgroup

UID = "1f0e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
SYS = UID.replace("-", "_")
CID = "a" * 56 + "0123abcd"


@pytest.mark.parametrize(("text", "want"), [
    # cgroup v2, systemd driver, containerd
    (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{SYS}.slice/cri-containerd-{CID}.scope\n",
     CgroupRef(pod_uid=UID, container_id=CID)),
    # guaranteed QoS (no QoS slice), CRI-O
    (f"0::/kubepods.slice/kubepods-pod{SYS}.slice/crio-{CID}.scope\n", CgroupRef(pod_uid=UID, container_id=CID)),
    # cgroup v2, cgroupfs driver, containerd (the bare id)
    (f"0::/kubepods/besteffort/pod{UID}/{CID}\n", CgroupRef(pod_uid=UID, container_id=CID)),
    # cgroup v1, cgroupfs, Docker: one line per hierarchy, the unified one empty
    (f"12:pids:/kubepods/burstable/pod{UID}/{CID}\n11:memory:/kubepods/burstable/pod{UID}/{CID}\n"
     "1:name=systemd:/\n0::/\n", CgroupRef(pod_uid=UID, container_id=CID)),
    # cgroup v1, systemd, docker through cri-dockerd
    (f"4:cpu,cpuacct:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{SYS}.slice/docker-{CID}.scope\n",
     CgroupRef(pod_uid=UID, container_id=CID)),
    # seen from inside another container's cgroup namespace: a relative path
    (f"0::/../../kubepods-besteffort-pod{SYS}.slice/cri-containerd-{CID}.scope\n",
     CgroupRef(pod_uid=UID, container_id=CID)),
    # a process in a sub-cgroup of its container (a systemd inside it)
    (f"0::/kubepods.slice/kubepods-pod{SYS}.slice/cri-containerd-{CID}.scope/init.scope\n",
     CgroupRef(pod_uid=UID, container_id=CID)),
    # CRI-O's monitor process: the pod, no container
    (f"0::/kubepods.slice/kubepods-pod{SYS}.slice/crio-conmon-{CID}.scope\n", CgroupRef(pod_uid=UID)),
    # the pod's own cgroup (a sandbox process)
    (f"0::/kubepods/pod{UID}\n", CgroupRef(pod_uid=UID)),
    # a static pod: its UID is a 32-digit hash
    (f"0::/kubepods/burstable/pod{'b' * 32}/{CID}\n", CgroupRef(pod_uid="b" * 32, container_id=CID)),
    # host processes: no pod
    ("0::/system.slice/nvidia-persistenced.service\n", None),
    ("0::/user.slice/user-1000.slice/session-3.scope\n", None),
    ("", None),
])
def test_parse(text: str, want: CgroupRef | None) -> None:
    assert parse_cgroup(text) == want


def test_v2_line_wins_over_v1(tmp_path: Path) -> None:
    other = "c" * 64
    text = f"3:memory:/kubepods/pod{UID}/{other}\n0::/kubepods/pod{UID}/{CID}\n"
    assert parse_cgroup(text) == CgroupRef(pod_uid=UID, container_id=CID)


def test_read_from_a_proc_tree(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(f"0::/kubepods/pod{UID}/{CID}\n")
    assert read_cgroup(tmp_path, 42) == CgroupRef(pod_uid=UID, container_id=CID)
    with pytest.raises(OSError):
        read_cgroup(tmp_path, 43)  # the process ended


def test_container_id_of_a_status() -> None:
    for scheme in ("containerd", "cri-o", "docker"):
        assert container_id(f"{scheme}://{CID}") == CID
