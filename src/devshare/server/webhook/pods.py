"""The pods the webhook looks up, and where from.

Two reviews need a pod the AdmissionReview does not carry: a Binding (``/validate-binding`` reads the
pod it binds, one GET, to tell a device pod) and a node agent's trade write (its partner among the
pods of the namespace on the pod's node, :mod:`devshare.server.webhook.allocations`). Both are rare
next to pod creations, so the webhook asks then rather than follow every pod of the cluster. A kube
backend is such a source: the cluster connection (``--kubeconfig``/``--in-cluster``,
:class:`~devshare.kube.rest.KubeClient`) or the ``--cluster`` file
(:class:`~devshare.kube.memory.MemoryBackend`).
"""

from __future__ import annotations

from typing import Any, Protocol


class PodSource(Protocol):
    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod ``namespace/name``, None when there is none."""
        ...

    async def list_node_pods(self, namespace: str, node: str) -> list[dict[str, Any]]:
        """The pods of ``namespace`` bound to ``node``."""
        ...
