"""What the extender's parts read of the world, as two small interfaces given at construction.

- :class:`ClusterView`: the cluster as the informer follows it (implemented by the engine's
  :class:`~devshare.engine.watched.WatchedCluster`, which the informer of :mod:`devshare.kube.informer`
  feeds): whether the first list is in, the pending pods kept for bind, which pods and groups exist,
  how far the watch of pods has come, the bound pods it holds back, a pod read from the API server
  to apply as a change, and what the node agents report their GPUs really use (``/ui``).
- :class:`Leadership`: whether this replica may write (the Lease: :class:`~devshare.kube.leader.
  LeaderElector` or :class:`~devshare.kube.leader.LeaseFollower`; :class:`Unelected` without one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from devshare.model.allocation import PodAllocation
from devshare.model.request import PodRequest
from devshare.model.usage import NodeUsage


class ClusterView(Protocol):
    @property
    def pending(self) -> Mapping[str, dict[str, Any]]:
        """The pending pods of this extender's scheduler as the watch last delivered them, by key."""
        ...

    @property
    def usage(self) -> Mapping[str, NodeUsage]:
        """Node -> what its agent last wrote in its Device's ``status.usage``."""
        ...

    @property
    def synced(self) -> bool:
        """Every kind was listed once: the state may be used."""
        ...

    def pending_pod(self, key: str) -> dict[str, Any] | None:
        """The pending pod ``key`` of this extender's scheduler as the watch last delivered it (the API
        server's object, never a caller's), or None."""
        ...

    def pod_exists(self, key: str, uid: str) -> bool:
        ...

    def group_exists(self, group: str) -> bool:
        ...

    def uncounted(self, node: str) -> list[tuple[PodRequest, PodAllocation]]:
        """The bound pods of ``node`` the watch delivered that the state does not count (over-booking)."""
        ...

    def note_pod(self, obj: dict[str, Any]) -> None:
        """A pod read from the API server, fresher than the watch so far: applied as a change."""
        ...

    def watch_version(self) -> str | None:
        """The resourceVersion the watch of pods has reached."""
        ...


class Leadership(Protocol):
    def may_write(self) -> bool:
        """Whether this replica may write now, as last known (read on every verb: it changes)."""
        ...

    async def check(self) -> str | None:
        """Judged afresh just before a write: why this replica may not write now, or None."""
        ...


class Unelected:
    """The leadership of an extender with no Lease: it always writes."""

    def may_write(self) -> bool:
        return True

    async def check(self) -> str | None:
        return None
