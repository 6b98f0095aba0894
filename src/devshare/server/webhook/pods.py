"""The pods the webhook looks up: a trade's partner (:mod:`devshare.server.webhook.allocations`).

Only a node agent's trade write needs one (rare: a stand-in that was not the pod kubelet admitted),
so the webhook asks the API server then, for the pods of the namespace on the pod's node, rather
than follow every pod of the cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from devshare.kube.live import LiveBackend


class NodePods(Protocol):
    async def node_pods(self, namespace: str, node: str) -> list[dict[str, Any]]:
        """The pods of ``namespace`` bound to ``node``."""
        ...


class StaticPods:
    """Pods given up front (tests)."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods

    async def node_pods(self, namespace: str, node: str) -> list[dict[str, Any]]:
        return [p for p in self.pods if (p.get("metadata") or {}).get("namespace") == namespace
                and (p.get("spec") or {}).get("nodeName") == node]


class LivePods:
    """Pods read from the API server (the webhook's ServiceAccount lists pods)."""

    def __init__(self, backend: LiveBackend) -> None:
        self.backend = backend

    async def node_pods(self, namespace: str, node: str) -> list[dict[str, Any]]:
        return await self.backend.list_node_pods(namespace, node)
