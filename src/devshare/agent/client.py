"""The agent's Kubernetes I/O, behind one small interface.

:class:`AgentClient` is everything the agent does against the API server; the implementation over the
one client of the API server is :mod:`devshare.agent.kubeclient` (the tests keep the objects in memory:
``tests/support/agent.py``). Objects are plain dicts, as the API serves them.
"""

from __future__ import annotations

from typing import Any, Protocol


class WriteRefused(Exception):
    """The API refused a write for good (an admission webhook or policy, an invalid change)."""


class AgentClient(Protocol):
    def get_device(self, name: str) -> dict[str, Any] | None:
        """The Device object named ``name`` (the node), or None."""
        ...

    def put_device(self, obj: dict[str, Any]) -> None:
        """Create the Device object, or replace its spec and annotations."""
        ...

    def patch_node_status(self, node: str, capacity: dict[str, str], allocatable: dict[str, str]) -> None:
        """Merge these extended resources into the Node's status.capacity / status.allocatable."""
        ...

    def patch_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
        """Merge these labels into the Node's (None: remove the label)."""
        ...

    def list_node_pods(self, node: str) -> list[dict[str, Any]]:
        """Every pod bound to ``node`` (spec.nodeName)."""
        ...

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str | None], *,
                              uid: str | None = None) -> None:
        """Merge these annotations into the pod's (None: remove). ``uid``: only if the pod is still that
        one. Raises LookupError when the pod is gone (or is another one now), :class:`WriteRefused`
        when the API refuses the change for good (admission); anything else may pass on retry."""
        ...

    def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        """Create a core v1 Event (a pod's container over its GPU memory share)."""
        ...
