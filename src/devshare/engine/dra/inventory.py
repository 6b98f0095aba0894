"""What the cluster's ResourceSlices offer, indexed for the allocator: devshare's devices per node
(matched to the engine's device tables by type, minor and UUID), every driver's devices by
``(driver, pool, device)`` and by UUID (a GPU another driver publishes is found by its UUID), and the
DeviceClasses. Selector answers are kept per device until its slice changes.
"""

from __future__ import annotations

from collections.abc import Iterable

from devshare.engine.caches import LRU
from devshare.engine.dra.cel import CelError, Selector, compile_selector
from devshare.engine.state import ClusterState
from devshare.model.dra import DRIVER
from devshare.model.draslices import DeviceClassInfo, SliceDevice

MATCHES_KEPT = 256  # selector sets whose per-device answers are kept


class Inventory:
    def __init__(self) -> None:
        self.slices: dict[str, list[SliceDevice]] = {}  # slice name -> devices
        self.by_ref: dict[tuple[str, str, str], SliceDevice] = {}  # (driver, pool, device)
        self.by_uuid: dict[str, SliceDevice] = {}  # devices of other drivers that carry a uuid
        self.ours: dict[str, dict[tuple[str, int], SliceDevice]] = {}  # node -> (type, minor) -> device
        self.classes: dict[str, DeviceClassInfo] = {}
        self.version = 0
        self._matches: LRU[tuple[tuple[str, ...], int], dict[tuple[str, str], tuple[bool, str]]] = LRU(MATCHES_KEPT)

    # ------------------------------------------------------------------ slices and classes
    def set_slice(self, name: str, devices: list[SliceDevice]) -> None:
        self.remove_slice(name)
        self.slices[name] = devices
        for d in devices:
            self.by_ref[(d.driver, d.pool, d.name)] = d
            if d.driver == DRIVER:
                dtype, minor = d.device_type, d.minor
                if dtype and minor is not None and d.node:
                    self.ours.setdefault(d.node, {})[(dtype, minor)] = d
            elif d.uuid:
                self.by_uuid[d.uuid] = d
        self.version += 1

    def remove_slice(self, name: str) -> None:
        old = self.slices.pop(name, None)
        if old is None:
            return
        for d in old:
            if self.by_ref.get((d.driver, d.pool, d.name)) is d:
                del self.by_ref[(d.driver, d.pool, d.name)]
            if d.driver == DRIVER:
                node = self.ours.get(d.node, {})
                if d.minor is not None and node.get((d.device_type, d.minor)) is d:
                    del node[(d.device_type, d.minor)]
                    if not node:
                        self.ours.pop(d.node, None)
            elif d.uuid and self.by_uuid.get(d.uuid) is d:
                del self.by_uuid[d.uuid]
        self.version += 1

    def set_class(self, info: DeviceClassInfo) -> None:
        self.classes[info.name] = info
        self.version += 1

    def remove_class(self, name: str) -> None:
        if self.classes.pop(name, None) is not None:
            self.version += 1

    def device(self, node: str, device_type: str, minor: int) -> SliceDevice | None:
        return self.ours.get(node, {}).get((device_type, minor))

    # ------------------------------------------------------------------ selectors
    def matching(self, state: ClusterState, device_type: str, expressions: tuple[str, ...],
                 nodes: Iterable[str]) -> tuple[dict[str, list[SliceDevice]], str]:
        """Per node of ``nodes``, devshare's devices of ``device_type`` that every expression selects and
        that the engine's state knows (same minor and UUID: a slice that disagrees with the Device
        object offers nothing there); and the first runtime error met (for the claim's message).
        Raises :class:`CelError` for an expression that cannot be used."""
        selectors: list[Selector] = [compile_selector(e) for e in expressions]
        answers = self._matches.get((expressions, self.version))
        if answers is None:
            answers = self._matches.put((expressions, self.version), {})
        table = state.tables.get(device_type)
        out: dict[str, list[SliceDevice]] = {}
        error = ""
        for node in nodes:
            row = state.row_of.get(node)
            devs = self.ours.get(node)
            if row is None or devs is None or table is None:
                continue
            found: list[SliceDevice] = []
            for (dtype, minor), d in devs.items():
                if dtype != device_type:
                    continue
                col = table.column_of(row, minor)
                if col < 0 or table.ids[row][col] != d.uuid:
                    continue
                key = (node, d.name)
                got = answers.get(key)
                if got is None:
                    got = answers[key] = _all(selectors, d)
                if got[0]:
                    found.append(d)
                elif got[1] and not error:
                    error = got[1]
            if found:
                out[node] = sorted(found, key=lambda d: d.minor or 0)
        return out, error


def _all(selectors: list[Selector], device: SliceDevice) -> tuple[bool, str]:
    for s in selectors:
        ok, err = s.matches(device)
        if not ok:
            return False, err
    return True, ""


__all__ = ["CelError", "Inventory"]
