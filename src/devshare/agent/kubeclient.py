"""The :class:`~devshare.agent.client.AgentClient` (and DRA's :class:`~devshare.agent.dra.node.NodeApi`)
over the one client of the API server (:class:`devshare.kube.rest.KubeClient`).

The agent works in threads (the reporter's loop, the device plugins' gRPC handlers, the trade
ticker); the client is asynchronous. So the client runs on an event loop of its own, in a thread of
its own, and each call here waits for its request there. What the agent decides about its objects
(which labels and annotations are its own) is here; how a request is made is the client's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from devshare.agent.client import WriteRefused
from devshare.kube.dra import path_of
from devshare.kube.errors import BackendError, NotFound
from devshare.kube.rest import KubeClient
from devshare.model import names

FIELD_MANAGER = "devshare-agent"
T = TypeVar("T")


class KubeAgentClient:
    """The agent's requests, from any thread. ``client``: the API client (default: the in-cluster
    ServiceAccount, or $KUBECONFIG); ``timeout``: seconds a call waits for its answer."""

    def __init__(self, client: KubeClient | None = None, *, timeout: float = 30.0) -> None:
        self.client = client or KubeClient.connect(field_manager=FIELD_MANAGER)
        self.timeout = timeout
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="devshare-agent-api", daemon=True)
        self._thread.start()

    def _run(self, call: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(call, self._loop).result(self.timeout)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self.client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def get_device(self, name: str) -> dict[str, Any] | None:
        return self._run(self.client.get_device(name))

    def put_device(self, obj: dict[str, Any]) -> None:
        current = self.get_device(obj["metadata"]["name"])
        if current is None:
            self._run(self.client.create_device(obj))
            return
        merged = dict(obj)
        meta = dict(obj["metadata"])
        meta["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
        annotations = dict((current.get("metadata") or {}).get("annotations") or {})
        annotations.pop(names.DEVICE_CHECKPOINTS, None)  # ours: absent now means none held outside
        annotations.update(obj["metadata"].get("annotations") or {})
        meta["annotations"] = annotations
        labels = {k: v for k, v in ((current.get("metadata") or {}).get("labels") or {}).items()
                  if k not in names.GPU_NODE_LABELS}  # ours: absent now means unknown
        labels.update(obj["metadata"].get("labels") or {})
        meta["labels"] = labels
        merged["metadata"] = meta
        self._run(self.client.replace_device(merged))

    def patch_node_status(self, node: str, capacity: dict[str, str], allocatable: dict[str, str]) -> None:
        self._run(self.client.patch_node_status(node, {"capacity": capacity, "allocatable": allocatable}))

    def patch_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
        self._run(self.client.patch_node_labels(node, labels))

    def list_node_pods(self, node: str) -> list[dict[str, Any]]:
        return self._run(self.client.list_node_pods(None, node))

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str | None], *,
                              uid: str | None = None) -> None:
        try:
            self._run(self.client.patch_pod_annotations(namespace, name, annotations, uid=uid))
        except NotFound:
            raise LookupError(f"pod {namespace}/{name} not found") from None
        except BackendError as e:
            if e.code in (409, 422) and uid is not None and "uid" in str(e).lower():
                raise LookupError(f"pod {namespace}/{name} not found (another pod has its name now)") from None
            if e.code in (400, 403, 422):
                raise WriteRefused(str(e)) from None
            raise

    def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        self._run(self.client.record_event(namespace, event))

    # ------------------------------------------------------------------ DRA (the node's ResourceSlice)
    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._run(self.client.get(path_of("resourceclaims", namespace, name)))

    def get_slice(self, name: str) -> dict[str, Any] | None:
        return self._run(self.client.get(path_of("resourceslices", None, name)))

    def create_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self._run(self.client.create(path_of("resourceslices"), obj))

    def replace_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT with the slice's resourceVersion (409 when another writer changed it since)."""
        return self._run(self.client.replace(path_of("resourceslices", None, str(obj["metadata"]["name"])), obj))
