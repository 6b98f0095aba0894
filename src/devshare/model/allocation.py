"""The allocation: which devices each container of a pod got, and how much of each."""

from __future__ import annotations

import msgspec

from devshare.model.request import WHOLE


class DeviceGrant(msgspec.Struct, frozen=True, kw_only=True):
    """A share of one device given to one container."""

    type: str
    minor: int
    id: str = ""
    core_milli: int = 0  # thousandths of the device's compute (RDMA/FPGA: share)
    memory: int = 0  # bytes (GPUs)
    memory_ratio_milli: int = 0  # memory as thousandths of the device's memory (GPUs)


class ContainerAllocation(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    devices: tuple[DeviceGrant, ...] = ()
    # an init container that runs to completion before the app containers start (not a restartable
    # "sidecar" one): kubelet hands its devices on to the app containers, so on each card the pod
    # holds the larger of what one init container and all the others hold (:meth:`PodAllocation.usage`)
    init: bool = False


class CardUsage(msgspec.Struct, frozen=True, kw_only=True):
    """What one pod holds of one device: compute (thousandths), memory (bytes), containers on it."""

    type: str
    minor: int
    core_milli: int
    memory: int
    slots: int
    whole: bool  # some grant on it takes the card whole
    memory_ratio_milli: int = 0  # the grants' memory ratios, counted as the memory is
    id: str = ""  # the device's id, as the grants give it


class PodAllocation(msgspec.Struct, frozen=True, kw_only=True):
    """Where a pod was placed and what each container got. The canonical annotation's content."""

    node: str
    containers: tuple[ContainerAllocation, ...] = ()

    def grants(self) -> list[tuple[int, DeviceGrant]]:
        """(container index, grant) for every grant of the pod."""
        return [(i, g) for i, c in enumerate(self.containers) for g in c.devices]

    def minors(self, device_type: str) -> list[int]:
        """Distinct minors of ``device_type`` used by the pod, in first-use order."""
        out: list[int] = []
        for _, g in self.grants():
            if g.type == device_type and g.minor not in out:
                out.append(g.minor)
        return out

    def usage(self) -> list[CardUsage]:
        """What the pod holds of each device, in first-use order: kubelet's semantics for init
        containers (they run one at a time, before the others, and hand their devices on), so per
        card the larger of the largest init container's grant and the sum of the other containers'
        grants, compute and memory each (as HAMi's CollapseInitContainerUsage and Koordinator's pod
        requests count). Without init containers: the sum of the grants per card."""
        apps: dict[tuple[str, int], list[int]] = {}
        inits: dict[tuple[str, int], list[int]] = {}
        ids: dict[tuple[str, int], str] = {}
        for c in self.containers:
            acc_of = inits if c.init else apps
            for g in c.devices:
                key = (g.type, g.minor)
                whole = g.core_milli >= WHOLE and (g.memory_ratio_milli >= WHOLE or g.memory == 0)
                acc = acc_of.get(key)
                if acc is None:
                    acc = acc_of[key] = [0, 0, 0, 0, 0]
                    apps.setdefault(key, [0, 0, 0, 0, 0])
                if g.id and key not in ids:
                    ids[key] = g.id
                if c.init:
                    acc[0], acc[1], acc[2] = max(acc[0], g.core_milli), max(acc[1], g.memory), 1
                    acc[4] = max(acc[4], g.memory_ratio_milli)
                else:
                    acc[0] += g.core_milli
                    acc[1] += g.memory
                    acc[2] += 1
                    acc[4] += g.memory_ratio_milli
                acc[3] |= whole
        out: list[CardUsage] = []
        for key, (core, memory, slots, any_whole, ratio) in apps.items():
            i = inits.get(key, (0, 0, 0, 0, 0))
            out.append(CardUsage(type=key[0], minor=key[1], core_milli=max(core, i[0]), memory=max(memory, i[1]),
                                 slots=max(slots, i[2]), whole=bool(any_whole or i[3]),
                                 memory_ratio_milli=max(ratio, i[4]), id=ids.get(key, "")))
        return out
