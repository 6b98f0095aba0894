"""The NVML backend against a fake pynvml module that mimics the NVML calls it uses (no GPU here)."""

from __future__ import annotations

import queue
import sys
import types
from typing import Any

import pytest

from devshare.agent.nvml import NvmlBackend, normalize_bus_id, parse_xids
from devshare.agent.reporter import Reporter
from devshare.model.device import parse_device
from devshare.model.links import bandwidth_from_links
from support.waiting import eventually_in_thread

GIB = 2**30


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_Timeout(NVMLError):
    pass


class NVMLError_InvalidArgument(NVMLError):
    pass


def fake_nvml(gpus: list[dict[str, Any]], nvlinks: dict[int, list[Any]], ancestors: dict[tuple[int, int], int]
              ) -> types.ModuleType:
    """A pynvml look-alike: ``gpus`` by index; ``nvlinks[i]`` lists per link the remote (GPU index or
    "switch"); ``ancestors[(i, j)]`` is the topology level."""
    m = types.ModuleType("pynvml")
    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    m.NVMLError_NotSupported = NVMLError_NotSupported  # type: ignore[attr-defined]
    m.NVMLError_Timeout = NVMLError_Timeout  # type: ignore[attr-defined]
    m.NVML_FEATURE_ENABLED = 1  # type: ignore[attr-defined]
    m.NVML_NVLINK_MAX_LINKS = 18  # type: ignore[attr-defined]
    m.NVML_NVLINK_DEVICE_TYPE_GPU = 0  # type: ignore[attr-defined]
    m.NVML_NVLINK_DEVICE_TYPE_SWITCH = 2  # type: ignore[attr-defined]
    m.nvmlEventTypeXidCriticalError = 8  # type: ignore[attr-defined]
    state: dict[str, Any] = {"init": 0, "events": queue.Queue(), "registered": []}
    m.state = state  # type: ignore[attr-defined]

    class Handle:
        def __init__(self, i: int) -> None:
            self.i = i

    def g(h: Handle) -> dict[str, Any]:
        if not isinstance(h, Handle):
            raise NVMLError("invalid argument")
        if h.i >= len(gpus) or gpus[h.i].get("lost"):
            raise NVMLError("GPU is lost")
        return gpus[h.i]

    m.nvmlInit = lambda: state.__setitem__("init", state["init"] + 1)  # type: ignore[attr-defined]
    m.nvmlShutdown = lambda: state.__setitem__("init", state["init"] - 1)  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: len(gpus)  # type: ignore[attr-defined]
    m.nvmlSystemGetDriverVersion = lambda: b"535.104.05"  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: Handle(i)  # type: ignore[attr-defined]
    m.nvmlDeviceGetUUID = lambda h: g(h)["uuid"]  # type: ignore[attr-defined]
    m.nvmlDeviceGetMinorNumber = lambda h: g(h)["minor"]  # type: ignore[attr-defined]
    m.nvmlDeviceGetName = lambda h: g(h)["name"].encode()  # old bindings return bytes  # type: ignore[attr-defined]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=g(h)["memory"], free=0, used=0)  # type: ignore[attr-defined]
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=g(h)["bus"])  # type: ignore[attr-defined]

    def numa(h: Handle) -> int:
        if "numa" not in g(h):
            raise NVMLError_NotSupported("no NUMA info")
        return int(g(h)["numa"])

    m.nvmlDeviceGetNumaNodeId = numa  # type: ignore[attr-defined]

    def link_state(h: Handle, link: int) -> int:
        links = nvlinks.get(h.i)
        if links is None:
            raise NVMLError_NotSupported("no NVLink")
        if link >= len(links):
            raise NVMLError_InvalidArgument("no such link")
        return 1 if links[link] is not None else 0

    def remote_type(h: Handle, link: int) -> int:
        return 2 if nvlinks[h.i][link] == "switch" else 0

    def remote_pci(h: Handle, link: int) -> Any:
        return types.SimpleNamespace(busId=gpus[nvlinks[h.i][link]]["bus"])

    m.nvmlDeviceGetNvLinkState = link_state  # type: ignore[attr-defined]
    m.nvmlDeviceGetNvLinkRemoteDeviceType = remote_type  # type: ignore[attr-defined]
    m.nvmlDeviceGetNvLinkRemotePciInfo = remote_pci  # type: ignore[attr-defined]
    m.nvmlDeviceGetTopologyCommonAncestor = (  # type: ignore[attr-defined]
        lambda a, b: ancestors.get((min(a.i, b.i), max(a.i, b.i)), 50))
    m.nvmlEventSetCreate = lambda: "event-set"  # type: ignore[attr-defined]

    def register(h: Handle, kind: int, es: Any) -> None:
        if g(h).get("no_events"):
            raise NVMLError_NotSupported("too old")
        state["registered"].append((h.i, kind))

    def wait(es: Any, timeout_ms: int) -> Any:
        try:
            return state["events"].get(timeout=timeout_ms / 1000 / 20)
        except queue.Empty:
            raise NVMLError_Timeout("timeout") from None

    m.nvmlDeviceRegisterEvents = register  # type: ignore[attr-defined]
    m.nvmlEventSetWait = wait  # type: ignore[attr-defined]
    m.nvmlEventSetFree = lambda es: None  # type: ignore[attr-defined]
    m.Handle = Handle  # type: ignore[attr-defined]
    return m


def four_gpus() -> list[dict[str, Any]]:
    return [
        {"uuid": f"GPU-{i}", "minor": i, "name": "Tesla V100-SXM2-16GB", "memory": 16 * GIB,
         "bus": f"00000000:{0x1A + i:02X}:00.0", "numa": i // 2}
        for i in range(4)
    ]


def test_discovery_links_and_bandwidth(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = four_gpus()
    del gpus[3]["numa"]  # falls back to sysfs, here absent: -1
    # 0-1: 2 NVLinks, 2-3: 1 NVLink, 0-2: 1; link 1 of GPU 3 is down
    nvlinks = {0: [1, 1, 2], 1: [0, 0], 2: [0, 3], 3: [2, None]}
    ancestors = {(0, 1): 10, (2, 3): 30, (0, 2): 40, (1, 2): 40}
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(gpus, nvlinks, ancestors))
    backend = NvmlBackend(watch_health=False)  # the real import path: `import pynvml`
    inv = backend.discover()
    assert [(g.minor, g.uuid, g.model, g.memory, g.numa_node) for g in inv.gpus] == [
        (0, "GPU-0", "Tesla V100-SXM2-16GB", 16 * GIB, 0), (1, "GPU-1", "Tesla V100-SXM2-16GB", 16 * GIB, 0),
        (2, "GPU-2", "Tesla V100-SXM2-16GB", 16 * GIB, 1), (3, "GPU-3", "Tesla V100-SXM2-16GB", 16 * GIB, -1)]
    assert inv.gpus[0].pci_bus_id == "0000:1a:00.0"
    assert (inv.vendor, inv.driver_version) == ("nvidia", "535.104.05")
    links = {(lk.a, lk.b): (lk.nvlinks, lk.pcie) for lk in inv.links}
    assert links == {(0, 1): (2, "single-switch"), (0, 2): (1, "same-cpu"), (0, 3): (0, "cross-cpu"),
                     (1, 2): (0, "same-cpu"), (1, 3): (0, "cross-cpu"), (2, 3): (1, "host-bridge")}
    nd = parse_device(Reporter(backend, "n").build())
    assert nd.gpu_bandwidth is not None
    assert [list(r) for r in nd.gpu_bandwidth] == bandwidth_from_links(4, list(inv.links))
    assert nd.gpu_bandwidth[0][1] == 50.0 and nd.gpu_bandwidth[1][2] == 16.0
    backend.close()
    assert sys.modules["pynvml"].state["init"] == 0  # type: ignore[attr-defined]


def test_nvswitch_fabric() -> None:
    gpus = four_gpus()
    nvml = fake_nvml(gpus, {i: ["switch"] * 12 for i in range(4)}, {})
    inv = NvmlBackend(nvml=nvml, watch_health=False).discover()
    assert all(lk.nvlinks == 12 and lk.via == "nvswitch" for lk in inv.links)
    assert len(inv.links) == 6


def test_xid_events_mark_cards_unhealthy() -> None:
    gpus = four_gpus()
    gpus[3]["no_events"] = True
    nvml = fake_nvml(gpus, {}, {})
    backend = NvmlBackend(nvml=nvml, ignored_xids=parse_xids("13, 31,43,45,68,109"))
    try:
        assert [i for i, _ in nvml.state["registered"]] == [0, 1, 2]  # type: ignore[attr-defined]
        events = nvml.state["events"]  # type: ignore[attr-defined]
        event = types.SimpleNamespace
        events.put(event(eventType=8, eventData=13, device=nvml.Handle(0)))  # type: ignore[attr-defined]
        events.put(event(eventType=8, eventData=79, device=nvml.Handle(1)))  # type: ignore[attr-defined]  # fell off the bus
        eventually_in_thread(lambda: backend.unhealthy, what="the XID events handled")
        assert [g.healthy for g in backend.discover().gpus] == [True, False, True, True]
        # an event without a device: every card is suspect
        assert backend.handle_event(event(eventType=8, eventData=48, device=None)) == "*"
        assert not any(g.healthy for g in backend.discover().gpus)
        assert backend.handle_event(event(eventType=1, eventData=0, device=None)) is None
    finally:
        backend.close()


def test_lost_card_disappears_and_reporter_keeps_it_unhealthy() -> None:
    gpus = four_gpus()
    backend = NvmlBackend(nvml=fake_nvml(gpus, {}, {}), watch_health=False)
    r = Reporter(backend, "n")
    r.build()
    gpus[2]["lost"] = True
    nd = parse_device(r.build())
    assert [(d.minor, d.health) for d in nd.of_type("gpu")] == [(0, True), (1, True), (2, False), (3, True)]


def test_helpers() -> None:
    assert normalize_bus_id(b"00000000:3B:00.0") == "0000:3b:00.0"
    assert parse_xids("") == frozenset()
    with pytest.raises(ValueError):
        parse_xids("13,abc")


class NVMLError_NotFound(NVMLError):
    pass


def test_processes_memory_and_utilization_samples() -> None:
    """NVML's running processes (compute and graphics, a pid in both counted once) with their memory
    (None where the driver does not say), and SM utilization: the mean of each pid's samples since the
    last call, 0 for a process with none (NOT_FOUND: no kernel ran), None on a GPU without samples."""
    m = fake_nvml(four_gpus()[:3], {}, {})
    m.NVMLError_NotFound = NVMLError_NotFound  # type: ignore[attr-defined]
    P = types.SimpleNamespace
    compute = {0: [P(pid=10, usedGpuMemory=2 * GIB), P(pid=11, usedGpuMemory=None)], 1: [P(pid=12, usedGpuMemory=GIB)],
               2: [P(pid=13, usedGpuMemory=GIB)]}
    graphics = {0: [P(pid=10, usedGpuMemory=2 * GIB)], 1: [], 2: []}
    since: list[tuple[int, int]] = []

    def samples(h: Any, ts: int) -> list[Any]:
        since.append((h.i, ts))
        if h.i == 1:
            raise NVMLError_NotFound("no samples")
        if h.i == 2:
            raise NVMLError_NotSupported("no process utilization")
        return [P(pid=10, timeStamp=5, smUtil=30, memUtil=0, encUtil=0, decUtil=0),
                P(pid=10, timeStamp=9, smUtil=50, memUtil=0, encUtil=0, decUtil=0)]

    m.nvmlDeviceGetComputeRunningProcesses = lambda h: compute[h.i]  # type: ignore[attr-defined]
    m.nvmlDeviceGetGraphicsRunningProcesses = lambda h: graphics[h.i]  # type: ignore[attr-defined]
    m.nvmlDeviceGetProcessUtilization = samples  # type: ignore[attr-defined]
    backend = NvmlBackend(nvml=m, watch_health=False)
    got = {(p.uuid, p.pid): (p.memory, p.sm) for p in backend.processes()}
    assert got == {("GPU-0", 10): (2 * GIB, 40.0), ("GPU-0", 11): (None, 0.0), ("GPU-1", 12): (GIB, 0.0),
                   ("GPU-2", 13): (GIB, None)}
    backend.processes()
    assert since[-3:] == [(0, 9), (1, 0), (2, 0)]  # the next read asks for samples newer than the last seen
