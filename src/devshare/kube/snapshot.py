"""One-shot reads of a cluster: list a backend into a fresh :class:`ClusterState`.

``devshare inspect`` and ``devshare schedule`` use it; the state is rebuilt from bound pods'
annotations exactly as the extender does at start-up (:class:`~devshare.kube.sync.StateSync`).
"""

from __future__ import annotations

import asyncio

from devshare.engine.state import ClusterState
from devshare.kube.backend import Backend
from devshare.kube.sync import StateSync
from devshare.model.errors import InvalidInput


async def load_state(backend: Backend, *, timeout: float = 60.0, state: ClusterState | None = None) -> ClusterState:
    """List Nodes, Devices and Pods once into a fresh state, then close the backend.

    Raises :class:`InvalidInput` when the cluster cannot be read within ``timeout`` seconds (the
    sync keeps retrying a failing list; its log says why)."""
    state = state if state is not None else ClusterState()
    sync = StateSync(backend, state)
    sync.start()
    try:
        await asyncio.wait_for(sync.synced.wait(), timeout)
    except TimeoutError:
        raise InvalidInput(
            f"could not read the cluster within {timeout:g} seconds: check that the API server is reachable "
            "and that the credentials may list nodes, pods and devices.devshare.io (the log says what failed)",
            field=getattr(backend, "source", None),
        ) from None
    finally:
        await sync.stop()
        await backend.close()
    return state
