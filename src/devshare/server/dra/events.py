"""Warning Events of the DRA controller (a pod refused, a claim not counted): each message once per
object (the last message of up to :data:`REPORTED_KEPT` objects is kept), sent without waiting."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from devshare.kube.dra import DraApi
from devshare.kube.errors import BackendError
from devshare.model import dra

log = logging.getLogger("devshare.server.dra.controller")

REPORTED_KEPT = 4096
FAILED_REASON = "FailedDRAAllocation"  # on a pod whose claims devshare cannot allocate
OVERBOOKED_REASON = "DeviceOverbooked"  # on a claim whose allocation would over-book a device: not counted


class DraEvents:
    def __init__(self, api: DraApi, spawn: Callable[[Awaitable[Any]], None]) -> None:
        self.api = api
        self.spawn = spawn  # runs a coroutine beside the caller (the controller's side tasks)
        self._reported: dict[str, str] = {}  # object key -> last message reported

    def forget(self, key: str) -> None:
        self._reported.pop(key, None)

    def report(self, kind: str, ns: str, name: str, uid: str, reason: str, message: str) -> None:
        key = f"{kind}/{ns}/{name}"
        if self._reported.get(key) == message:
            return
        self._reported[key] = message
        while len(self._reported) > REPORTED_KEPT:
            self._reported.pop(next(iter(self._reported)))
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        api_version = "v1" if kind == "Pod" else dra.API_VERSION
        event = {"apiVersion": "v1", "kind": "Event",
                 "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": ns},
                 "involvedObject": {"apiVersion": api_version, "kind": kind, "namespace": ns, "name": name,
                                    "uid": uid},
                 "reason": reason, "type": "Warning", "message": message[:1024],
                 "source": {"component": "devshare-dra"}, "reportingComponent": "devshare-dra",
                 "firstTimestamp": now, "lastTimestamp": now, "count": 1}
        self.spawn(self._send(ns, event))

    async def _send(self, ns: str, event: dict[str, Any]) -> None:
        try:
            await self.api.record_event(ns, event)
        except BackendError as e:
            log.info("could not record event %s: %s", event["reason"], e)
