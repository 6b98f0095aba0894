"""Per-container GPU usage from the fake backend's processes, a /proc tree and the node's pods:
each process counted once under its container (or "unknown"), every share shown beside its use,
over-share episodes counted and reported once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.agent.cgroups import CgroupRef
from devshare.agent.fake import FakeBackend
from devshare.agent.inventory import GpuProcess
from devshare.agent.usage import UNKNOWN, OverShare, PodIndex, UsageMonitor, UsageReader, attribute, summary
from devshare.model.dialects.koordinator_names import KOORD_GPU_CORE
from support.agent import GIB, MemoryClient, gpu, pod

MIB = 2**20


def cid(n: int) -> str:
    return f"{n:064x}"


def uid(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-{n:012x}"


def running(name: str, n: int, containers: dict[str, tuple[int, list[Any]]], **kw: Any) -> dict[str, Any]:
    """A running pod with uid(n), each container: (its container id number, its grants)."""
    p = pod(name, "n1", [(c, {KOORD_GPU_CORE: 50}, grants) for c, (_, grants) in containers.items()], uid=uid(n),
            phase="Running", **kw)
    p["status"]["containerStatuses"] = [{"name": c, "containerID": f"containerd://{cid(i)}"}
                                        for c, (i, _) in containers.items()]
    return p


class Node:
    """A fake node: its description (GPUs and processes), a /proc tree, its pods."""

    def __init__(self, tmp: Path, gpus: int = 2) -> None:
        self.fake = tmp / "node.yaml"
        self.proc = tmp / "proc"
        self.proc.mkdir()
        self.data: dict[str, Any] = {"gpus": gpus, "memory": "16Gi", "processes": []}
        self.write()
        self.backend = FakeBackend(self.fake, node="n1")
        self.inv = self.backend.discover()
        self.uuids = [g.uuid for g in self.inv.gpus]
        self.pods: list[dict[str, Any]] = []
        self.listings = 0

    def write(self) -> None:
        self.fake.write_text(yaml.safe_dump(self.data))

    def process(self, pid: int, gpu: int, memory: str | None, *, cgroup: str | None, sm: float | None = None) -> None:
        entry: dict[str, Any] = {"gpu": gpu, "pid": pid}
        if memory is not None:
            entry["memory"] = memory
        if sm is not None:
            entry["sm"] = sm
        self.data["processes"].append(entry)
        self.write()
        if cgroup is not None:
            (self.proc / str(pid)).mkdir(exist_ok=True)
            (self.proc / str(pid) / "cgroup").write_text(cgroup)

    def in_container(self, pod_n: int, container_n: int) -> str:
        pod_slice = f"kubepods-pod{uid(pod_n).replace('-', '_')}.slice"
        return f"0::/kubepods.slice/{pod_slice}/cri-containerd-{cid(container_n)}.scope\n"

    def list_pods(self, fresh: bool) -> list[dict[str, Any]]:
        self.listings += 1
        return json.loads(json.dumps(self.pods))

    def reader(self) -> UsageReader:
        return UsageReader(self.backend, "n1", self.list_pods, lambda: self.inv, proc=self.proc)


def rows_by_key(rows: list[Any]) -> dict[tuple[str, str, str, int], Any]:
    return {(r.namespace, r.pod, r.container, r.minor): r for r in rows}


def test_each_process_counts_under_its_container_beside_its_share(tmp_path: Path) -> None:
    node = Node(tmp_path)
    u = node.uuids
    node.pods = [
        running("a", 1, {"main": (11, [gpu(0, u[0], 500, 8 * GIB)]), "side": (12, [gpu(1, u[1], 250, 4 * GIB)])}),
        running("idle", 2, {"main": (21, [gpu(0, u[0], 300, 0, 300)])}),
    ]
    node.process(100, 0, "3Gi", cgroup=node.in_container(1, 11), sm=20)
    node.process(101, 0, "2Gi", cgroup=node.in_container(1, 11), sm=15)
    node.process(102, 1, "1Gi", cgroup=node.in_container(1, 12), sm=5)
    node.process(200, 0, "512Mi", cgroup="0::/system.slice/ollama.service\n")  # a host process
    node.process(201, 1, "256Mi", cgroup=None)  # its cgroup cannot be read: it ended, or /proc is not the host's
    node.process(202, 1, "128Mi", cgroup=f"0::/kubepods/pod{uid(1)}/{cid(99)}\n")  # pod a, a container not known
    node.process(203, 1, None, cgroup=node.in_container(1, 12))  # the driver does not say its memory
    reader = node.reader()
    rows = rows_by_key(reader.read())
    main = rows[("default", "a", "main", 0)]
    assert (main.memory_used, main.processes, main.memory_allocated, main.core_allocated) == (5 * GIB, 2, 8 * GIB, 0.5)
    assert main.utilization == pytest.approx(0.35) and not main.over_share
    side = rows[("default", "a", "side", 1)]
    assert (side.memory_used, side.processes, side.memory_allocated) == (GIB, 2, 4 * GIB)
    idle = rows[("default", "idle", "main", 0)]
    assert (idle.memory_used, idle.processes, idle.utilization) == (0, 0, 0.0)
    assert idle.memory_allocated == 16 * GIB * 3 // 10  # a memory-ratio share
    assert rows[(UNKNOWN, UNKNOWN, UNKNOWN, 0)].memory_used == 512 * MIB
    assert rows[(UNKNOWN, UNKNOWN, UNKNOWN, 1)].memory_used == 256 * MIB
    assert rows[("default", "a", UNKNOWN, 1)].memory_used == 128 * MIB
    assert reader.unreadable == 1
    # nothing dropped: per GPU, the rows add up to what its processes hold
    assert sum(r.memory_used for r in rows.values() if r.minor == 1) == (1024 + 256 + 128) * MIB
    assert node.listings == 2  # container 99 unknown: the pods were listed again, once


def test_a_restarted_container_is_found_by_listing_again(tmp_path: Path) -> None:
    node = Node(tmp_path)
    u = node.uuids
    node.pods = [running("a", 1, {"main": (11, [gpu(0, u[0], 500, 8 * GIB)])})]
    stale = json.loads(json.dumps(node.pods))
    node.pods[0]["status"]["containerStatuses"][0]["containerID"] = f"cri-o://{cid(13)}"  # restarted
    calls: list[bool] = []

    def pods(fresh: bool) -> list[dict[str, Any]]:
        calls.append(fresh)
        return node.pods if fresh else stale

    node.process(100, 0, "1Gi", cgroup=node.in_container(1, 13))
    rows = rows_by_key(UsageReader(node.backend, "n1", pods, lambda: node.inv, proc=node.proc).read())
    assert calls == [False, True]
    assert rows[("default", "a", "main", 0)].memory_used == GIB


def test_over_share_is_an_episode_counted_and_reported_once(tmp_path: Path) -> None:
    node = Node(tmp_path)
    u = node.uuids
    node.pods = [running("a", 1, {"main": (11, [gpu(0, u[0], 250, 4 * GIB)])})]
    client = MemoryClient()
    events: list[str] = []

    def event(row: Any, message: str) -> None:
        events.append(message)
        client.record_event(row.namespace, {"involvedObject": {"name": row.pod}, "message": message})

    monitor = UsageMonitor(node.reader(), node="n1", event=event, publish_interval=0)
    counts = []
    for memory in ("3Gi", "5Gi", "6Gi", "2Gi", "4Gi", "4097Mi"):
        node.data["processes"] = []
        node.process(100, 0, memory, cgroup=node.in_container(1, 11))
        monitor.round()
        counts.append(monitor.over.counts.get(("default", "a", "main", u[0]), 0))
    assert counts == [0, 1, 1, 1, 1, 2]  # above 4 GiB twice: two episodes
    assert events == [
        f"container main uses 5.00 GiB of GPU {u[0]} (minor 0), more than its share of 4.00 GiB",
        f"container main uses 4.00 GiB of GPU {u[0]} (minor 0), more than its share of 4.00 GiB",
    ]
    # a GPU its allocation does not give it
    node.process(101, 1, "1Gi", cgroup=node.in_container(1, 11))
    monitor.round()
    assert events[-1] == f"container main uses 1.00 GiB of GPU {u[1]} (minor 1), which its allocation does not give it"
    # unknown processes are never over a share
    node.process(102, 1, "9Gi", cgroup="0::/\n")
    monitor.round()
    assert len(events) == 3


def test_the_device_status_block_changes_only_with_the_figures(tmp_path: Path) -> None:
    node = Node(tmp_path)
    u = node.uuids
    node.pods = [running("a", 1, {"main": (11, [gpu(0, u[0], 500, 8 * GIB)])})]
    node.process(100, 0, "3Gi", cgroup=node.in_container(1, 11), sm=40)
    rows = node.reader().read()
    first = summary(rows, node.inv, 0.0)
    assert first["gpus"][0] == {"minor": 0, "id": u[0], "memoryUsed": 3 * GIB, "utilization": 0.4, "containers": [
        {"pod": "default/a", "container": "main", "memoryUsed": 3 * GIB, "memoryAllocated": 8 * GIB,
         "utilization": 0.4, "coreAllocated": 0.5}]}
    assert first["gpus"][1] == {"minor": 1, "id": u[1], "memoryUsed": 0, "utilization": 0.0, "containers": []}
    node.data["processes"][0]["memory"] = 3 * GIB + 1000  # less than a MiB more
    assert summary(node.reader().read(), node.inv, 0.0) == first


def test_publishing_waits_its_interval(tmp_path: Path) -> None:
    node = Node(tmp_path)
    now = [0.0]
    monitor = UsageMonitor(node.reader(), node="n1", publish_interval=60, clock=lambda: now[0], wall=lambda: now[0])
    monitor.round()
    first = monitor.status
    now[0] = 30
    node.process(100, 0, "1Gi", cgroup="0::/\n")
    monitor.round()
    assert monitor.status is first
    now[0] = 61
    monitor.round()
    assert monitor.status is not first and monitor.status is not None
    assert monitor.status["gpus"][0]["memoryUsed"] == GIB


# ------------------------------------------------------------------------------------------ properties
OWNERS = st.sampled_from(["c11", "c12", "c21", "pod1", "pod9", "host", "unreadable"])


@settings(max_examples=200, deadline=None)
@given(procs=st.lists(st.tuples(OWNERS, st.integers(0, 2), st.one_of(st.none(), st.integers(0, 4 * GIB)),
                                st.one_of(st.none(), st.floats(0, 100))), max_size=20))
def test_every_process_is_counted_once_and_every_share_is_shown(
        procs: list[tuple[str, int, int | None, float | None]]) -> None:
    """Whatever runs where: per GPU the rows add up to its processes' memory and count, each process
    under exactly one owner (unknown when it cannot be attributed), and every share has its row."""
    from devshare.agent.inventory import Gpu, Inventory

    inv = Inventory(gpus=tuple(Gpu(minor=i, uuid=f"GPU-{i}", memory=16 * GIB) for i in range(3)))
    pods = [running("a", 1, {"m": (11, [gpu(0, "GPU-0", 500, 8 * GIB)]), "s": (12, [gpu(1, "GPU-1", 300, 0, 300)])}),
            running("b", 2, {"m": (21, [gpu(2, "GPU-2", 1000)])})]
    refs: dict[int, CgroupRef | None] = {}
    processes = []
    for pid, (owner, g, mem, sm) in enumerate(procs, start=100):
        refs[pid] = {"c11": CgroupRef(pod_uid=uid(1), container_id=cid(11)),
                     "c12": CgroupRef(pod_uid=uid(1), container_id=cid(12)),
                     "c21": CgroupRef(pod_uid=uid(2), container_id=cid(21)),
                     "pod1": CgroupRef(pod_uid=uid(1), container_id=cid(77)),
                     "pod9": CgroupRef(pod_uid=uid(9), container_id=cid(99)),
                     "host": None, "unreadable": None}[owner]
        processes.append(GpuProcess(uuid=f"GPU-{g}", pid=pid, memory=mem, sm=sm))
    rows = attribute(processes, refs, PodIndex(pods, "n1"), inv)
    keys = [r.key for r in rows]
    assert len(keys) == len(set(keys))
    for g in range(3):
        mine = [r for r in rows if r.uuid == f"GPU-{g}"]
        on = [p for p in processes if p.uuid == f"GPU-{g}"]
        assert sum(r.memory_used for r in mine) == sum(p.memory or 0 for p in on)
        assert sum(r.processes for r in mine) == len(on)
    shares = {(r.pod, r.container, r.minor) for r in rows if r.memory_allocated}
    assert shares == {("a", "m", 0), ("a", "s", 1), ("b", "m", 2)}
    for r in rows:
        assert r.utilization is None or 0 <= r.utilization <= 1
        if r.pod == UNKNOWN:
            assert r.container == UNKNOWN and not r.over_share


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["x", "y", "z"]), st.integers(0, 8)), max_size=12))
def test_over_share_counts_the_rising_edges_while_a_container_is_present(rounds: list[dict[str, int]]) -> None:
    """Processes appear and vanish (a container present with no process uses 0); a container gone
    loses its count (its series ends); the count is the number of times it went above its share."""
    from devshare.agent.usage import ContainerUsage

    over = OverShare()
    expect: dict[str, int] = {}
    was: dict[str, bool] = {}
    for used in rounds:
        rows = [ContainerUsage(namespace="ns", pod=p, container="c", uuid="GPU-0", minor=0, memory_used=m * GIB,
                               memory_allocated=4 * GIB) for p, m in used.items()]
        new = over.update(rows)
        for p in list(expect):
            if p not in used:
                del expect[p]
                was.pop(p, None)
        rising_now = set()
        for p, m in used.items():
            if m > 4 and not was.get(p, False):
                expect[p] = expect.get(p, 0) + 1
                rising_now.add(p)
            was[p] = m > 4
        assert {r.pod for r in new} == rising_now
        assert {k[1]: v for k, v in over.counts.items()} == {p: v for p, v in expect.items() if v}
