"""The :class:`~devshare.agent.client.AgentClient` over a real API server (lightkube).

The only module of the agent that imports lightkube.
"""

from __future__ import annotations

from typing import Any

from lightkube import ApiError, Client
from lightkube.generic_resource import create_global_resource
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.types import PatchType

from devshare.agent.client import WriteRefused
from devshare.model import names

Device = create_global_resource(group="devshare.io", version="v1alpha1", kind=names.DEVICE_KIND, plural="devices")
FIELD_MANAGER = "devshare-agent"


def _dict(obj: Any) -> dict[str, Any]:
    data = obj.to_dict() if hasattr(obj, "to_dict") else dict(obj)
    return dict(data)


class LightkubeClient:
    """Talks to the API server with the in-cluster config (or the kubeconfig of ``lightkube.Client()``)."""

    def __init__(self, client: Client | None = None) -> None:
        self.client = client or Client(field_manager=FIELD_MANAGER)

    def get_device(self, name: str) -> dict[str, Any] | None:
        try:
            return _dict(self.client.get(Device, name))
        except ApiError as e:
            if e.status.code == 404:
                return None
            raise

    def put_device(self, obj: dict[str, Any]) -> None:
        current = self.get_device(obj["metadata"]["name"])
        if current is None:
            self.client.create(Device.from_dict(obj))
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
        self.client.replace(Device.from_dict(merged))

    def patch_node_status(self, node: str, capacity: dict[str, str], allocatable: dict[str, str]) -> None:
        self.client.patch(Node.Status, node, {"status": {"capacity": capacity, "allocatable": allocatable}},
                          patch_type=PatchType.MERGE)

    def patch_node_labels(self, node: str, labels: dict[str, str | None]) -> None:
        self.client.patch(Node, node, {"metadata": {"labels": labels}}, patch_type=PatchType.MERGE)

    def list_node_pods(self, node: str) -> list[dict[str, Any]]:
        pods = (_dict(p) for p in self.client.list(Pod, namespace="*", fields={"spec.nodeName": node}))
        return [p for p in pods if (p.get("spec") or {}).get("nodeName") == node]

    def patch_pod_annotations(self, namespace: str, name: str, annotations: dict[str, str | None], *,
                              uid: str | None = None) -> None:
        meta: dict[str, Any] = {"annotations": annotations}
        if uid is not None:
            meta["uid"] = uid  # a precondition: another pod under this name refuses the patch (422)
        try:
            self.client.patch(Pod, name, {"metadata": meta}, namespace=namespace, patch_type=PatchType.MERGE)
        except ApiError as e:
            code = e.status.code
            if code == 404 or (code in (409, 422) and uid is not None and "uid" in str(e.status.message).lower()):
                raise LookupError(f"pod {namespace}/{name} not found") from None
            if code in (400, 403, 422):
                raise WriteRefused(str(e.status.message)) from None
            raise

    def record_event(self, namespace: str, event: dict[str, Any]) -> None:
        self.client.create(Event.from_dict(event), namespace=namespace)  # type: ignore[call-overload]
