"""GPU discovery and health through NVML (``pynvml``, package nvidia-ml-py).

Per GPU: UUID, minor, model, total memory, PCI bus id, NUMA node; and the driver's version.
Between every pair: the NVLink count (links in the enabled state whose remote end is the other
GPU, by remote PCI bus id; links whose remote device is an NVSwitch count toward the switch
fabric, and two GPUs both on the fabric get ``min`` of their switch links, ``via: nvswitch``)
and the PCIe common-ancestor level.
The bandwidth matrix comes from these through the model of :mod:`devshare.model.links`.

Health: a thread waits for NVML's XID critical-error events; a card that reports an XID not in
the ignored list turns unhealthy (and stays so until the agent restarts, as NVIDIA's device plugin
does). The default ignored list is NVIDIA's: 13 (graphics engine exception), 31 (GPU memory page
fault), 43 (GPU stopped processing), 45 (preemptive cleanup), 68 (video processor exception) and
109 (context switch timeout) are application errors, not a broken card. A card NVML no longer
returns is simply missing from the inventory; the reporter keeps it, unhealthy.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from devshare.agent.inventory import Gpu, GpuProcess, Inventory, OtherDevice
from devshare.model.links import Link

log = logging.getLogger("devshare.agent.nvml")

VENDOR = "nvidia"  # the vendor of every GPU NVML reports (Koordinator's GPUVendorNVIDIA)
DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})

# nvmlGpuTopologyLevel_t -> the PCIe level names of devshare.model.links
PCIE_LEVELS = {0: "same-board", 10: "single-switch", 20: "multiple-switches", 30: "host-bridge",
               40: "same-cpu", 50: "cross-cpu"}


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def normalize_bus_id(bus_id: Any) -> str:
    """``00000000:3B:00.0`` -> ``0000:3b:00.0`` (the sysfs spelling, 4-digit domain)."""
    text = _text(bus_id).strip().lower()
    parts = text.split(":")
    if len(parts) == 3:
        parts[0] = parts[0][-4:].rjust(4, "0")
    return ":".join(parts)


def parse_xids(text: str) -> frozenset[int]:
    """A comma separated XID list (``13,31``); ``all`` is not accepted (it would hide every failure)."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if part:
            out.add(int(part))
    return frozenset(out)


class NvmlBackend:
    """Discovery and XID health through NVML. ``nvml`` is the pynvml module (injectable for tests)."""

    def __init__(
        self,
        *,
        ignored_xids: Iterable[int] = DEFAULT_IGNORED_XIDS,
        others: tuple[OtherDevice, ...] = (),
        nvml: Any = None,
        watch_health: bool = True,
        sysfs: Path = Path("/sys/bus/pci/devices"),
    ) -> None:
        self.nvml = nvml if nvml is not None else importlib.import_module("pynvml")
        nvml = self.nvml
        self.ignored_xids = frozenset(ignored_xids)
        self.others = others
        self.sysfs = sysfs
        self.unhealthy: set[str] = set()
        self._lock = threading.Lock()
        self._links_cache: tuple[tuple[str, ...], tuple[Link, ...]] | None = None
        self._sampled: dict[str, int] = {}  # GPU uuid -> timestamp (us) of the newest utilization sample read
        self._told: set[str] = set()  # warnings given once
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        nvml.nvmlInit()
        if watch_health:
            self._event_set = self._register_events()
            self._thread = threading.Thread(target=self._watch_xids, name="devshare-xid", daemon=True)
            self._thread.start()

    # ---- discovery

    def _handles(self) -> list[Any]:
        n = self.nvml
        out = []
        for i in range(n.nvmlDeviceGetCount()):
            try:
                out.append(n.nvmlDeviceGetHandleByIndex(i))
            except n.NVMLError as e:
                log.warning("GPU %d cannot be opened: %s", i, e)
        return out

    def _numa(self, handle: Any, bus_id: str) -> int:
        try:
            return int(self.nvml.nvmlDeviceGetNumaNodeId(handle))
        except (self.nvml.NVMLError, AttributeError):
            pass
        try:
            return int((self.sysfs / bus_id / "numa_node").read_text().strip())
        except (OSError, ValueError):
            return -1

    def _gpu(self, handle: Any) -> Gpu:
        n = self.nvml
        uuid = _text(n.nvmlDeviceGetUUID(handle))
        bus_id = normalize_bus_id(n.nvmlDeviceGetPciInfo(handle).busId)
        with self._lock:
            healthy = uuid not in self.unhealthy
        return Gpu(
            minor=int(n.nvmlDeviceGetMinorNumber(handle)),
            uuid=uuid,
            model=_text(n.nvmlDeviceGetName(handle)),
            memory=int(n.nvmlDeviceGetMemoryInfo(handle).total),
            pci_bus_id=bus_id,
            numa_node=self._numa(handle, bus_id),
            healthy=healthy,
        )

    def _nvlinks(self, handles: list[Any], gpus: list[Gpu]) -> tuple[list[list[int]], list[int]]:
        """Direct NVLink counts per pair, and NVSwitch links per GPU."""
        n = self.nvml
        index = {g.pci_bus_id: i for i, g in enumerate(gpus)}
        count = [[0] * len(gpus) for _ in gpus]
        switch = [0] * len(gpus)
        for i, h in enumerate(handles):
            for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    if n.nvmlDeviceGetNvLinkState(h, link) != n.NVML_FEATURE_ENABLED:
                        continue
                except n.NVMLError:
                    break  # no NVLink, or no more links
                try:
                    remote_type = n.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)
                except (n.NVMLError, AttributeError):
                    remote_type = None
                if remote_type == getattr(n, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2):
                    switch[i] += 1
                    continue
                try:
                    remote = normalize_bus_id(n.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
                except n.NVMLError:
                    continue
                j = index.get(remote)
                if j is not None and j != i:
                    count[i][j] += 1
        return count, switch

    def _links(self, handles: list[Any], gpus: list[Gpu]) -> tuple[Link, ...]:
        n = self.nvml
        count, switch = self._nvlinks(handles, gpus)
        links: list[Link] = []
        for i in range(len(gpus)):
            for j in range(i + 1, len(gpus)):
                try:
                    level = PCIE_LEVELS.get(int(n.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])),
                                            "cross-cpu")
                except n.NVMLError:
                    level = "cross-cpu"
                direct = max(count[i][j], count[j][i])
                fabric = min(switch[i], switch[j])
                if fabric > direct:
                    links.append(Link(a=i, b=j, nvlinks=fabric, pcie=level, via="nvswitch"))
                else:
                    links.append(Link(a=i, b=j, nvlinks=direct, pcie=level))
        return tuple(links)

    def discover(self) -> Inventory:
        handles = self._handles()
        pairs: list[tuple[Gpu, Any]] = []
        for h in handles:
            try:
                pairs.append((self._gpu(h), h))
            except self.nvml.NVMLError as e:  # lost while we looked: missing, the reporter marks it
                log.warning("a GPU could not be read: %s", e)
        pairs.sort(key=lambda p: p[0].minor)
        gpus = [g for g, _ in pairs]
        handles = [h for _, h in pairs]
        key = tuple(g.uuid for g in gpus)
        if self._links_cache is None or self._links_cache[0] != key:
            self._links_cache = (key, self._links(handles, gpus))
        return Inventory(gpus=tuple(gpus), links=self._links_cache[1], others=self.others,
                         vendor=VENDOR if gpus else "", driver_version=self._driver_version())

    def _driver_version(self) -> str:
        try:
            return _text(self.nvml.nvmlSystemGetDriverVersion())
        except (self.nvml.NVMLError, AttributeError):
            return ""

    # ---- processes

    def processes(self) -> list[GpuProcess]:
        """Per GPU, the processes running on it (compute and graphics: NVML's running processes) with
        the memory each holds (None where the driver does not say, as under some vGPU setups), and
        each one's SM utilization from the process samples since the last call
        (``nvmlDeviceGetProcessUtilization``): the mean of its samples; 0 for a process with no
        sample (it ran no kernel meanwhile); None where the GPU gives no samples. MIG instances are
        not read (their processes are not attributed to a parent's memory here)."""
        n = self.nvml
        out: list[GpuProcess] = []
        for h in self._handles():
            try:
                uuid = _text(n.nvmlDeviceGetUUID(h))
            except n.NVMLError:
                continue
            held: dict[int, int | None] = {}
            for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
                getter = getattr(n, name, None)
                if getter is None:
                    continue
                try:
                    running = getter(h)
                except n.NVMLError as e:
                    self._once(f"{name}/{uuid}", "%s on GPU %s: %s (its processes are not read)", name, uuid, e)
                    continue
                for proc in running:
                    pid = int(proc.pid)
                    mem = proc.usedGpuMemory
                    mem = int(mem) if mem is not None else None
                    if pid not in held or (mem is not None and (held[pid] or 0) < mem):
                        held[pid] = mem
            if not held:
                continue
            sm = self._sm_samples(h, uuid)
            out.extend(GpuProcess(uuid=uuid, pid=pid, memory=mem,
                                  sm=None if sm is None else sm.get(pid, 0.0)) for pid, mem in held.items())
        return out

    def _sm_samples(self, handle: Any, uuid: str) -> dict[int, float] | None:
        """pid -> mean SM percent of its samples since the last call; None when the GPU has none."""
        n = self.nvml
        since = self._sampled.get(uuid, 0)
        try:
            samples = n.nvmlDeviceGetProcessUtilization(handle, since)
        except AttributeError:
            return None
        except n.NVMLError as e:
            if type(e).__name__ == "NVMLError_NotFound":  # no sample since: no process ran a kernel
                return {}
            self._once(f"samples/{uuid}", "GPU %s gives no process utilization samples (%s)", uuid, e)
            return None
        acc: dict[int, list[float]] = {}
        newest = since
        for s in samples:
            acc.setdefault(int(s.pid), []).append(float(s.smUtil))
            newest = max(newest, int(s.timeStamp))
        self._sampled[uuid] = newest
        return {pid: sum(v) / len(v) for pid, v in acc.items()}

    def _once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._told:
            self._told.add(key)
            log.warning(message, *args)

    # ---- health

    def _register_events(self) -> Any:
        n = self.nvml
        event_set = n.nvmlEventSetCreate()
        for h in self._handles():
            try:
                n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, event_set)
            except n.NVMLError as e:
                log.warning("GPU %s cannot report XID events (%s): its health is not watched",
                            _text(n.nvmlDeviceGetUUID(h)), e)
        return event_set

    def handle_event(self, event: Any) -> str | None:
        """Apply one NVML event; returns the UUID marked unhealthy ("*": all), or None when ignored."""
        n = self.nvml
        if event.eventType != n.nvmlEventTypeXidCriticalError:
            return None
        xid = int(event.eventData)
        if xid in self.ignored_xids:
            log.info("ignoring XID %d (an application error)", xid)
            return None
        try:
            uuid = _text(n.nvmlDeviceGetUUID(event.device)) if event.device is not None else "*"
        except n.NVMLError:
            uuid = "*"
        with self._lock:
            if uuid == "*":
                self.unhealthy.update(_text(n.nvmlDeviceGetUUID(h)) for h in self._handles())
            else:
                self.unhealthy.add(uuid)
        log.error("XID %d on GPU %s: marked unhealthy", xid, uuid if uuid != "*" else "(unknown: all GPUs)")
        return uuid

    def _watch_xids(self) -> None:
        n = self.nvml
        while not self._stop.is_set():
            try:
                event = n.nvmlEventSetWait(self._event_set, 1000)
            except n.NVMLError_Timeout:
                continue
            except n.NVMLError as e:
                log.error("waiting for NVML events failed: %s", e)
                self._stop.wait(1.0)
                continue
            self.handle_event(event)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=3)
            with contextlib.suppress(Exception):
                self.nvml.nvmlEventSetFree(self._event_set)
        with contextlib.suppress(Exception):
            self.nvml.nvmlShutdown()
