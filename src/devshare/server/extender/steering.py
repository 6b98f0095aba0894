"""The extender's leader writes the steering taint onto the Node objects (issue 41).

:mod:`devshare.engine.steering` says which nodes should carry ``devshare.io/whole-gpu-free:
PreferNoSchedule`` (a GPU on them that nobody uses); :class:`Steerer` makes the cluster's Nodes say
so. It follows the Nodes as one more handler of the informer (their taints and resourceVersion, nothing
else), and once a second, while this replica leads, writes the nodes whose taint is wrong: at most
``per_round`` of them a round, the others in the next rounds, starting each round where the last one
stopped so that none waits behind the others.

Each write is a merge patch of the whole taint list (Taint has no merge key: a list is replaced, not
merged) carrying the resourceVersion it was read at, so a taint written meanwhile by someone else is
never lost: the API server answers 409 and the node is written again from the watch's newer copy.
Nothing else of the Node changes (deploy/scheduler/node-writes.yaml pins that for the scheduler's
account).

With ``scheduling.steerOtherPods: false`` the leader removes the taints it finds, so turning it off
clears the cluster. A 403 (RBAC without ``patch nodes``) or a 422 (an admission policy refusing) stops
the writes with one log line; the rest of the extender runs on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from devshare.engine.state import ClusterState
from devshare.engine.steering import TAINT_EFFECT, TAINT_KEY, steered_nodes
from devshare.kube.errors import BackendError, Conflict, NotFound, Unavailable
from devshare.model.kubeobjects import meta
from devshare.server.extender.view import Leadership

log = logging.getLogger(__name__)

TAINT: dict[str, Any] = {"key": TAINT_KEY, "effect": TAINT_EFFECT}


class TaintWriter(Protocol):
    async def patch_node_taints(self, node: str, taints: list[dict[str, Any]], resource_version: str
                                ) -> dict[str, Any]: ...


def _marked(taints: list[dict[str, Any]]) -> bool:
    return any(t.get("key") == TAINT_KEY for t in taints)


class Steerer:
    """Keeps the steering taint of every Node as :func:`~devshare.engine.steering.steered_nodes` wants it
    (``enabled``), or off every Node (not ``enabled``)."""

    def __init__(self, state: ClusterState, writer: TaintWriter, leadership: Leadership, *, enabled: bool,
                 ready: Callable[[], Awaitable[Any]], interval: float = 1.0, per_round: int = 20,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.state = state
        self.writer = writer
        self.leadership = leadership
        self.enabled = enabled
        self.ready = ready
        self.interval = interval
        self.per_round = per_round
        self._sleep = sleep
        self.nodes: dict[str, tuple[str, list[dict[str, Any]]]] = {}  # name -> (resourceVersion, taints)
        self._start = 0  # where the next round starts in the nodes' order
        self.stopped: str | None = None  # why writes stopped for good (RBAC, an admission policy)
        self.written = 0  # taints set or removed
        self.conflicts = 0  # writes that met a newer node (written again from the watch's copy)
        self.failures = 0  # writes that failed otherwise (the API server unavailable)
        self._changes = 0  # Node events seen (with the state's version: whether a round has anything new)
        self._settled: tuple[int, int] | None = None  # (state version, node events) of a round with nothing to do

    # ------------------------------------------------------------------ the informer's handler
    def listed(self, kind: str, items: list[dict[str, Any]], *, initial: bool) -> list[str]:
        if kind == "nodes":
            self.nodes = {}
            self._changes += 1
            for obj in items:
                self._keep(obj)
        return []

    def changed(self, kind: str, type_: str, obj: dict[str, Any]) -> None:
        if kind != "nodes":
            return
        if type_ == "DELETED":
            self.nodes.pop(str(meta(obj).get("name", "")), None)
            self._changes += 1
        else:
            self._keep(obj)

    def progressed(self, kind: str, version: str, *, synced: bool) -> None:
        pass

    def _keep(self, obj: dict[str, Any]) -> None:
        self._changes += 1
        name, rv = meta(obj).get("name"), meta(obj).get("resourceVersion")
        if not name or not rv:
            return
        taints = (obj.get("spec") or {}).get("taints") or []
        self.nodes[str(name)] = (str(rv), [t for t in taints if isinstance(t, dict)])

    # ------------------------------------------------------------------ reconciling
    def plan(self) -> list[tuple[str, bool]]:
        """The nodes whose taint is wrong now, each with whether it should carry it, in round order."""
        want = steered_nodes(self.state) if self.enabled else set()
        names = list(self.nodes)
        if not names:
            return []
        start = self._start % len(names)
        out = []
        for name in names[start:] + names[:start]:
            marked = _marked(self.nodes[name][1])
            if (name in want) != marked:
                out.append((name, not marked))
        return out

    async def reconcile(self) -> int:
        """Write at most ``per_round`` wrong nodes; returns how many were written. A round after one that
        found nothing to do, with neither the state nor a Node changed since, looks at nothing."""
        seen = (self.state.version, self._changes)
        if seen == self._settled:
            return 0
        todo = self.plan()[: self.per_round]
        if not todo:
            self._settled = seen
            return 0
        if todo:
            names = list(self.nodes)
            self._start = (names.index(todo[-1][0]) + 1) if todo[-1][0] in self.nodes else 0
        done = 0
        for name, mark in todo:
            if name not in self.nodes:
                continue
            rv, taints = self.nodes[name]
            new = [t for t in taints if t.get("key") != TAINT_KEY] + ([dict(TAINT)] if mark else [])
            try:
                obj = await self.writer.patch_node_taints(name, new, rv)
            except (Conflict, NotFound):
                self.conflicts += 1  # the watch brings the newer node (or its deletion)
                continue
            except Unavailable as e:
                self.failures += 1
                log.info("steering taints: the API server is unavailable (%s); trying again next round", e)
                return done
            except BackendError as e:
                if e.code in (401, 403, 422):
                    self.stopped = str(e)
                    log.warning("steering taints: writing Node %s was refused (%s); devshare no longer marks nodes"
                                " (RBAC: patch nodes, and deploy/scheduler/node-writes.yaml, docs/deploy.md)",
                                name, e)
                    return done
                self.failures += 1
                log.warning("steering taints: writing Node %s failed (%s)", name, e)
                continue
            self._keep(obj)
            done += 1
            self.written += 1
        return done

    async def run(self) -> None:
        await self.ready()
        if self.enabled:
            log.info("steering: marking nodes with a free whole GPU %s:%s (scheduling.steerOtherPods)",
                     TAINT_KEY, TAINT_EFFECT)
        while self.stopped is None:
            await self._sleep(self.interval)
            if not self.leadership.may_write():
                continue
            try:
                await self.reconcile()
            except Exception:  # never let one surprise stop the extender
                log.exception("steering taints: a round failed")
