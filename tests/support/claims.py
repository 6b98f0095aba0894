"""Replicas of the extender for the claim ledger's tests: each with a state, a lifecycle, claims and a
binder of its own over a shared backend, its watch of pods delivering only what a test asks."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from typing import Any

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.engine.watched import WatchedCluster
from devshare.kube.backend import KINDS
from devshare.kube.errors import Unavailable
from devshare.kube.ledger import Claim, ClaimLedger
from devshare.kube.memory import MemoryBackend
from devshare.model.annotations import encode_annotations
from devshare.model.codecs import decode_allocation
from devshare.model.pod import parse_pod
from devshare.server.extender.claims import Claims
from devshare.server.extender.claimsweep import ClaimSweep
from devshare.server.extender.extender import Extender

NODE = "node-0"


class Replica:
    """One extender's state, lifecycle and claims over a shared backend: its watch of pods delivers
    only what :meth:`watch` is asked to (blind until then). ``ledger``: its binds write claims."""

    def __init__(self, backend: Any, name: str, *, clock: Callable[[], float] | None = None,
                 linger: float = 0.0, catch_up: float = 0.1, ledger: bool = True) -> None:
        self.backend = backend
        self.state = ClusterState()
        self.scheduler = Scheduler(self.state)
        self.lifecycle = Lifecycle(self.scheduler)
        self.sync = WatchedCluster(self.lifecycle, clock=time.monotonic)
        self.inner = inner = getattr(backend, "inner", backend)
        self.claims = Claims(ClaimLedger(backend), self.lifecycle, self.sync, identity=name, linger=linger,
                             catch_up=catch_up, **({"clock": clock} if clock else {}))
        self.sweep = ClaimSweep(self.claims)
        self.extender = Extender(self.lifecycle, backend, self.sync, claims=self.claims if ledger else None)
        self.binder = self.extender.binder
        for kind in KINDS:  # as the informer lists: the state first, then the extender
            items, rv = inner.store.list(kind)
            self.sync.listed(kind, items, initial=True)
            self.extender.listed(kind, items, initial=True)
            self.sync.progressed(kind, rv, synced=True)

    def watch(self, events: int | None = None) -> int:
        """Deliver the next ``events`` pod events of the API server (None: all of them) to this
        replica's state, as its watch would; how many were delivered."""
        pending = self.inner.store.events_since("pods", int(self.sync.versions["pods"]))
        for e in pending[:events]:
            self.sync.changed("pods", e.type, e.object)
            self.claims.pod_changed(e.type, e.object)
            self.sync.progressed("pods", str(e.object["metadata"]["resourceVersion"]), synced=True)
        return len(pending[:events])

    async def bind(self, obj: dict[str, Any], node: str = NODE) -> str:
        """What the extender's bind does: choose and assume, then the writes (fence, claim, Binding) of
        :meth:`Binder.write`; the reservation undone when they fail."""
        req = parse_pod(obj)
        if req.key in self.state.pods:
            return f"pod {req.key}: a bind is already in progress"  # as the extender's Lifecycle.binding
        alloc = self.scheduler.allocate_on(req, node)
        if isinstance(alloc, str):
            return alloc
        self.lifecycle.assume(req, alloc, now=0.0)
        ann = encode_annotations(req, alloc, now_ns=0, device_memory=self.state.gpu_memory(node))
        error, _ = await self.binder.write(req, node, alloc, ann, obj["metadata"]["resourceVersion"])
        if error:
            self.lifecycle.forget(req.key, alloc)
            return error
        self.lifecycle.confirm(req, alloc)
        return ""


class Jittery:
    """A backend whose every request first waits a random moment (interleavings vary), and whose
    writes fail now and then (``fail_rate``), half of them after they were made (the connection broke
    on the answer: the caller cannot tell)."""

    WRITES = ("bind_pod", "create_config_map", "replace_config_map", "patch_pod_annotations")

    def __init__(self, inner: MemoryBackend, rng: random.Random, fail_rate: float = 0.0) -> None:
        self.inner = inner
        self.rng = rng
        self.fail_rate = fail_rate

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr) or name in ("watch", "close"):
            return attr

        async def jittered(*args: Any, **kw: Any) -> Any:
            await asyncio.sleep(self.rng.random() * 0.002)
            fails = name in self.WRITES and self.rng.random() < self.fail_rate
            if fails and self.rng.random() < 0.5:
                raise Unavailable(f"injected: {name} not sent")
            out = await attr(*args, **kw)
            if fails:
                raise Unavailable(f"injected: {name} made, its answer lost")
            return out

        return jittered


def usage(backend: MemoryBackend) -> dict[tuple[str, int], list[int]]:
    used: dict[tuple[str, int], list[int]] = {}
    for p in backend.store.objects.get("pods", {}).values():
        alloc = decode_allocation(p["metadata"].get("annotations") or {})
        if alloc is None or not p["spec"].get("nodeName"):
            continue
        for _, g in alloc.grants():
            acc = used.setdefault((alloc.node, g.minor), [0, 0])
            acc[0] += g.core_milli
            acc[1] += g.memory
    return used


async def ledger_claims(backend: Any, node: str = NODE) -> dict[str, Claim]:
    """The claims in the ledger on ``node``."""
    return {k: c for k, c in (await ClaimLedger(backend).read()).claims.items() if c.node == node}


