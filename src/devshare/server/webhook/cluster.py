"""What the webhook knows about the cluster: the device types some node has.

The validating webhook refuses a pod that asks for a device type no node has. That needs cluster
knowledge, kept behind :class:`DeviceTypes`; without a source the check is skipped. A source that
knows no Device object at all also answers ``None`` (skip): a fresh cluster whose node agents have
not reported yet must not have every device pod refused.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Protocol

from devshare.kube.backend import Backend
from devshare.kube.informer import Informer
from devshare.kube.persist import load_documents
from devshare.model import names
from devshare.model.device import parse_device
from devshare.model.errors import InvalidInput
from devshare.model.kubeobjects import meta

log = logging.getLogger(__name__)


class DeviceTypes(Protocol):
    """A source of the device types present in the cluster."""

    def known_types(self) -> frozenset[str] | None:
        """Types some node has (healthy or not); ``None`` when unknown (the check is skipped)."""
        ...


class StaticDeviceTypes:
    """A fixed set (tests, or a cluster described on the command line)."""

    def __init__(self, types: frozenset[str] | None) -> None:
        self._types = types

    def known_types(self) -> frozenset[str] | None:
        return self._types


def types_in_documents(docs: list[Any], *, where: str = "") -> frozenset[str] | None:
    """Device types of the Device objects among ``docs`` (other kinds ignored); None when none."""
    found: set[str] = set()
    seen_device = False
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or doc.get("kind") != names.DEVICE_KIND:
            continue
        seen_device = True
        try:
            node = parse_device(doc)
        except InvalidInput as e:
            raise InvalidInput(e.message, field=f"{where}document {i + 1}: {e.field or 'Device'}") from None
        found.update(d.type for d in node.devices)
    return frozenset(found) if seen_device else None


class ClusterFileDeviceTypes:
    """Device types read from a ``--cluster`` file (multi-document YAML), re-read when it changes."""

    def __init__(self, path: Path | str, *, interval: float = 2.0) -> None:
        self.path = Path(path)
        self.interval = interval
        self._types = self._load()
        self._mtime = self._stat()
        self._checked = time.monotonic()

    def _stat(self) -> int:
        return os.stat(self.path).st_mtime_ns

    def _load(self) -> frozenset[str] | None:
        return types_in_documents(load_documents(self.path), where=f"{self.path}: ")

    def known_types(self) -> frozenset[str] | None:
        now = time.monotonic()
        if now - self._checked >= self.interval:
            self._checked = now
            try:
                mtime = self._stat()
                if mtime != self._mtime:
                    self._types = self._load()
                    self._mtime = mtime
            except (OSError, InvalidInput) as e:
                log.warning("keeping the previous device types of %s: %s", self.path, e)
        return self._types


class WatchedDeviceTypes:
    """Device types of the Device objects of a live cluster, followed by the informer (devices only).
    ``None`` until the first list, and while no Device exists."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.types: dict[str, frozenset[str]] = {}  # Device name -> the types it lists
        self.informer = Informer(backend, [self], kinds=("devices",))

    async def start(self) -> None:
        self.informer.start()

    async def stop(self) -> None:
        await self.informer.stop()
        await self.backend.close()

    def known_types(self) -> frozenset[str] | None:
        if not self.informer.is_synced or not self.types:
            return None
        return frozenset().union(*self.types.values())

    # the informer's handler
    def listed(self, kind: str, items: list[dict[str, Any]], *, initial: bool) -> list[str]:
        present = {str(meta(o).get("name", "")) for o in items}
        for name in [n for n in self.types if n not in present]:
            del self.types[name]
        for obj in items:
            self.changed(kind, "ADDED", obj)
        return []

    def changed(self, kind: str, type_: str, obj: dict[str, Any]) -> None:
        name = str(meta(obj).get("name", ""))
        if type_ == "DELETED":
            self.types.pop(name, None)
            return
        try:
            self.types[name] = frozenset(d.type for d in parse_device(obj).devices)
        except InvalidInput as e:
            log.warning("ignoring Device %s (keeping what it said before): %s", name, e)

    def progressed(self, kind: str, version: str, *, synced: bool) -> None:
        pass
