"""One-shot reads of a cluster: list a backend into a fresh :class:`ClusterState`.

``devshare inspect`` and ``devshare schedule`` use it; the state is rebuilt from bound pods'
annotations exactly as the extender does at start-up (the informer of :mod:`devshare.kube.informer`
feeding the engine's :class:`~devshare.engine.watched.WatchedCluster`).
"""

from __future__ import annotations

import asyncio
import time

from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.engine.watched import WatchedCluster
from devshare.kube.backend import Backend
from devshare.kube.informer import Informer
from devshare.model.errors import InvalidInput


async def load_state(backend: Backend, lifecycle: Lifecycle | None = None, *, timeout: float = 60.0) -> ClusterState:
    """List Nodes, Devices and Pods once into ``lifecycle``'s state (a fresh one when None), then close
    the backend.

    Raises :class:`InvalidInput` when the cluster cannot be read within ``timeout`` seconds (the
    informer keeps retrying a failing list; its log says why)."""
    lifecycle = lifecycle if lifecycle is not None else Lifecycle(Scheduler(ClusterState()))
    informer = Informer(backend, [WatchedCluster(lifecycle, clock=time.monotonic)])
    informer.start()
    try:
        await asyncio.wait_for(informer.synced.wait(), timeout)
    except TimeoutError:
        raise InvalidInput(
            f"could not read the cluster within {timeout:g} seconds: check that the API server is reachable "
            "and that the credentials may list nodes, pods and devices.devshare.io (the log says what failed)",
            field=getattr(backend, "source", None),
        ) from None
    finally:
        await informer.stop()
        await backend.close()
    return lifecycle.state
