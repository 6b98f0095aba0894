"""The Events the extender writes on pods (``Preempted`` on a victim, ``DeviceOverbooked`` on a pod whose
allocation is refused): built here, written best effort (a failure is logged, never raised)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from devshare.kube.backend import Backend
from devshare.kube.errors import BackendError
from devshare.model.kubeobjects import meta
from devshare.model.names import ALLOCATION

log = logging.getLogger(__name__)

COMPONENT = "devshare-extender"
OVERBOOKED_REASON = "DeviceOverbooked"  # the Event on a pod whose allocation was refused


def pod_event(namespace: str, name: str, uid: str, *, reason: str, type_: str, message: str) -> dict[str, Any]:
    """A v1 Event about the pod ``namespace/name`` (of ``uid``)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": uid},
        "reason": reason, "type": type_, "message": message,
        "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }


class Events:
    """Writes Events through ``backend``."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._tasks: set[asyncio.Task[None]] = set()

    async def record(self, event: dict[str, Any]) -> None:
        """Write ``event`` (best effort)."""
        ns = str(event["metadata"]["namespace"])
        try:
            await self.backend.record_event(ns, event)
        except BackendError as e:
            log.info("could not record the %s event of %s/%s: %s", event.get("reason"), ns,
                     event["involvedObject"]["name"], e)

    def record_soon(self, event: dict[str, Any]) -> None:
        """Write ``event`` in the background (outside the event loop: not at all)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # a one-shot reconcile (no loop): logged and counted only
        task = loop.create_task(self.record(event))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def overbooked(self, pod: dict[str, Any], reason: str) -> None:
        """A Warning Event ``DeviceOverbooked`` on ``pod``, whose allocation the state refused (the
        engine's :class:`~devshare.engine.watched.WatchedCluster` reports it), in the background."""
        m = meta(pod)
        self.record_soon(pod_event(
            str(m.get("namespace", "")), str(m.get("name", "")), str(m.get("uid") or ""),
            reason=OVERBOOKED_REASON, type_="Warning",
            message=(f"devshare refused the allocation written on this pod (annotation {ALLOCATION}): {reason}. "
                     "Its devices are not counted; only devshare's scheduler may write allocations")))
