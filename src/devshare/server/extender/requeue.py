"""Nudging the pods devshare refused when devices free up, so that kube-scheduler tries them again.

kube-scheduler parks a pod no node fits in its unschedulable queue and brings it back on a cluster
event its queueing hints find relevant (v1.37). A pod the extender refused carries the fake plugin
``Extender`` among its rejectors, whose hint takes *any* event, so the deletion of the GPU pod that
held the devices does bring it back, but kube-scheduler's informer may deliver that deletion before
the extender's watch does: the retry's filter still sees the devices taken, the pod is parked again,
and nothing else happens until kube-scheduler's flush of unschedulable pods (5 minutes).

So the extender itself makes the event once *its* state has freed the devices: when a pod holding
devices is deleted or finishes, or a Device object's devices change, it patches a small annotation
``devshare.io/devices-freed-at: <time>`` onto each pod it refused for lack of free devices. An update
of a pending pod is such an event for kube-scheduler (``Pod/Update``), which requeues it (after its
backoff) and asks the filter again, now against the freed devices.

Who is nudged: the pods whose last filter found no node, with some node failing only for devices in
use (``FailedNodes``: freed devices may help; a pod no node could ever take is not nudged), that are
still pending, of this extender's scheduler (the state's watch keeps those: ``pending_pod``), with the
same uid. Only the leader nudges (it is the one kube-scheduler asks). Rate: a pod at most once per
``per_pod`` seconds (a later freeing is kept for it and served when that time has passed), at most
``per_round`` pods per round, rounds at most ``delay`` apart (a burst of deletions, a drained node,
is one round).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from devshare.kube.backend import Backend
from devshare.kube.errors import BackendError, NotFound
from devshare.model.kubeobjects import meta, object_key
from devshare.model.names import ALLOCATION
from devshare.server.extender.view import ClusterView, Leadership

log = logging.getLogger(__name__)

FREED_AT = "devshare.io/devices-freed-at"
REFUSED_KEPT = 4096  # refused pods remembered at most (the oldest refusals are forgotten first)
TERMINAL = ("Succeeded", "Failed")


class Requeue:
    def __init__(
        self,
        backend: Backend,
        cluster: ClusterView,
        leadership: Leadership,
        *,
        clock: Callable[[], float] = time.monotonic,
        delay: float = 0.2,
        per_pod: float = 2.0,
        per_round: int = 100,
    ) -> None:
        self.backend = backend
        self.cluster = cluster  # the pending pods of devshare's scheduler as the watch has them
        self.leadership = leadership
        self.clock = clock
        self.delay = delay
        self.per_pod = per_pod
        self.per_round = per_round
        self.refused: dict[str, str] = {}  # pod key -> uid, refused by its last filter for devices in use
        self._due: set[str] = set()  # refused pods owed a nudge (devices freed since their last one)
        self._last: dict[str, float] = {}  # pod key -> when it was last nudged
        self._devices: dict[str, int] = {}  # Device name -> hash of its spec (a change frees or adds devices)
        self._wake = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self.nudged = 0  # patches made
        self.failures = 0  # patches that failed (logged)

    # ------------------------------------------------------------------ what the filter found
    def refused_pod(self, key: str, uid: str) -> None:
        """The filter found no node for the pod and some only for devices in use."""
        self.refused.pop(key, None)
        self.refused[key] = uid
        while len(self.refused) > REFUSED_KEPT:
            self.forget(next(iter(self.refused)))

    def forget(self, key: str) -> None:
        """The pod passed a filter, was bound or is gone: nothing to nudge."""
        if self.refused.pop(key, None) is not None:
            self._due.discard(key)
            self._last.pop(key, None)

    # ------------------------------------------------------------------ what the watch delivered
    def changed(self, kind: str, type_: str, obj: dict[str, Any]) -> None:
        """A watch event (after the state applied it): devices freed?"""
        if kind == "pods":
            key = object_key(obj)
            phase = (obj.get("status") or {}).get("phase")
            if type_ == "DELETED" or phase in TERMINAL:
                self.forget(key)
                annotations = meta(obj).get("annotations")
                if (obj.get("spec") or {}).get("nodeName") and isinstance(annotations, dict) and \
                        ALLOCATION in annotations:
                    self.devices_freed()
        elif kind == "devices":
            name = str(meta(obj).get("name", ""))
            if type_ == "DELETED":
                self._devices.pop(name, None)
                return
            spec = hash(repr(obj.get("spec")))
            if self._devices.get(name) != spec:
                self._devices[name] = spec
                self.devices_freed()

    def devices_freed(self) -> None:
        """Every refused pod is owed a nudge; a round is started soon."""
        if not self.refused:
            return
        self._due.update(self.refused)
        self._wake.set()

    # ------------------------------------------------------------------ nudging
    async def run(self) -> None:
        """Nudge the pods owed a nudge, a round at a time, until cancelled."""
        try:
            while True:
                await self._wake.wait()
                await asyncio.sleep(self.delay)  # a burst of freed devices is one round
                self._wake.clear()
                await self.round()
        finally:
            if self._timer is not None:
                self._timer.cancel()

    async def round(self) -> int:
        """One round of nudges; returns how many pods were patched."""
        if not self.leadership.may_write():
            self._due.clear()
            return 0
        now = self.clock()
        ready: list[tuple[str, str]] = []
        wait = None
        for key in list(self._due):
            uid = self.refused.get(key)
            if uid is None or not self._still_refusable(key, uid):
                self._due.discard(key)
                if uid is not None:
                    self.forget(key)
                continue
            left = self._last.get(key, -self.per_pod) + self.per_pod - now
            if left > 0:
                wait = left if wait is None else min(wait, left)
            elif len(ready) < self.per_round:
                ready.append((key, uid))
            else:
                wait = self.delay if wait is None else min(wait, self.delay)
        for key, _ in ready:
            self._due.discard(key)
            self._last[key] = now
        if wait is not None:
            self._later(wait)
        if not ready:
            return 0
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        results = await asyncio.gather(*(self._nudge(key, stamp) for key, _ in ready))
        return sum(results)

    def _still_refusable(self, key: str, uid: str) -> bool:
        """Still pending, of this extender's scheduler, the same pod (the watch's object)."""
        obj = self.cluster.pending_pod(key)
        if obj is None:
            return False
        seen = str(meta(obj).get("uid") or "")
        return not uid or not seen or seen == uid

    async def _nudge(self, key: str, stamp: str) -> int:
        ns, _, name = key.partition("/")
        try:
            await self.backend.patch_pod_annotations(ns, name, {FREED_AT: stamp})
        except NotFound:
            self.forget(key)
            return 0
        except BackendError as e:
            self.failures += 1
            log.info("could not nudge pod %s after devices were freed (%s); kube-scheduler will retry it "
                     "at its own pace", key, e)
            return 0
        self.nudged += 1
        log.debug("nudged pod %s: devices were freed", key)
        return 1

    def _later(self, seconds: float) -> None:
        """Wake again in ``seconds`` (pods whose last nudge was too recent)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_later(max(seconds, 0.0), self._wake.set)
