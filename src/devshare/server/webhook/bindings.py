"""Who may bind a device pod (seed 001's upgrade webhook): "the webhook will take over the Binding
operation of the GPU Pod. If the Binding is not initiated by [devshare], it will be rejected."

A Binding (``pods/binding``, or the older ``bindings`` resource, CREATE) is judged here:

- made by one of devshare's own identities (the allocation writers, :mod:`allocations`): allowed
  without a look at the pod (the webhook configuration's matchConditions keep these from being sent
  at all; this is the same rule for API servers without them);
- carrying an allocation annotation (the API server copies a Binding's annotations onto its pod):
  refused, whatever the pod asks for, as a pod CREATE or UPDATE carrying one is;
- of a pod that asks for a device devshare manages (:func:`devshare.model.podresources.requests_devices`):
  refused with the reason. Another scheduler binding it (a second scheduler during a migration,
  ``spec.nodeName`` set by a controller through a Binding, a person with ``kubectl create``) would
  give its cards to a pod devshare never counted;
- anything else (a pod asking for no device, a pod that does not exist): allowed.

The Binding does not carry the pod, so the pod is read (one GET) from a :class:`PodSource`: the
webhook's cluster connection (``--kubeconfig``/``--in-cluster``) or its ``--cluster`` file. Without a
source, or when the read fails, a Binding by anyone else is refused and says why (a guard that
lets a device pod through whenever it cannot look is no guard).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from devshare.model import dialects
from devshare.model.errors import InvalidInput
from devshare.model.podresources import container_resources, requests_devices
from devshare.model.problems import Problems
from devshare.server.webhook.allocations import allocation_annotations
from devshare.server.webhook.pods import PodSource

REASON = "foreign-binding"  # the rejections metric's reason class
BINDING_KINDS = ("Binding",)


def is_binding(kind: str, operation: str, sub_resource: str) -> bool:
    """Is this review the CREATE of a Binding (``pods/binding`` or ``bindings``)?"""
    return operation == "CREATE" and kind in BINDING_KINDS and sub_resource in ("", "binding")


def target(binding: Any, namespace: str, name: str) -> tuple[str, str, str]:
    """(namespace, pod name, node) of a Binding; the review's namespace and name when the object
    leaves them out (the ``pods/binding`` subresource names the pod in the URL)."""
    meta = binding.get("metadata") if isinstance(binding, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    tgt = binding.get("target") if isinstance(binding, dict) else None
    node = tgt.get("name") if isinstance(tgt, dict) else None
    ns = meta.get("namespace") or namespace
    pod = name or meta.get("name") or ""
    return str(ns or "default"), str(pod), str(node or "")


def device_names(pod: dict[str, Any]) -> list[str]:
    """The managed device resource names the pod asks for (for the message)."""
    found: list[str] = []
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return found
    managed = dialects.resource_names()
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        for c in containers if isinstance(containers, list) else []:
            if not isinstance(c, dict):
                continue
            for k, v in container_resources(c, "", Problems()).items():
                if k in managed and v not in ("0", 0) and k not in found:
                    found.append(k)
    return found


def refuse_annotations(binding: Any, username: str, writers: Collection[str]) -> str | None:
    """Why a Binding carrying allocation annotations is refused (None when it carries none)."""
    carried = allocation_annotations(binding)
    if not carried:
        return None
    return (f"the Binding carries annotation(s) {', '.join(sorted(carried))}, which the API server would copy "
            f"onto the pod; only devshare ({', '.join(writers)}) may write them, not "
            f"{username or 'an anonymous user'}: bind without them")


def refuse_device_pod(pod: dict[str, Any], key: str, node: str, username: str, writers: Collection[str],
                      scheduler_name: str) -> str | None:
    """Why binding ``pod`` is refused (None when it asks for no managed device)."""
    try:
        if not requests_devices(pod):
            return None
    except InvalidInput:
        pass  # unreadable resources on an existing pod: it is not for anyone but devshare to bind
    asked = ", ".join(device_names(pod)) or "managed devices"
    return (f"pod {key} asks for {asked}, which only devshare places: its Binding to node {node or '?'} may be "
            f"made only by devshare ({', '.join(writers)}), not by {username or 'an anonymous user'}. Another "
            "scheduler binding it would give it cards devshare never counted, which could then go to a second "
            f"pod. Leave the pod to devshare (spec.schedulerName: {scheduler_name}; delete and re-create it "
            "if it names another scheduler)")


async def refuse_binding(binding: Any, namespace: str, name: str, username: str, writers: Collection[str],
                         pods: PodSource | None, scheduler_name: str) -> str | None:
    """Why this Binding CREATE may not go through; None when it may."""
    if username in writers:
        return None
    refused = refuse_annotations(binding, username, writers)
    if refused:
        return refused
    ns, pod_name, node = target(binding, namespace, name)
    key = f"{ns}/{pod_name}"
    if pods is None:
        return (f"cannot tell whether pod {key} asks for devices: the devshare webhook runs without a cluster "
                "connection (start it with --in-cluster, --kubeconfig or --cluster), so only devshare "
                f"({', '.join(writers)}) may bind pods")
    try:
        pod = await pods.get_pod(ns, pod_name)
    except Exception as e:  # an API error: fail closed, the binder retries
        return (f"could not read pod {key} to check whether it asks for devices ({type(e).__name__}: {e}); "
                "try again")
    if pod is None:
        return None  # the API server answers the Binding of a missing pod with its own NotFound
    return refuse_device_pod(pod, key, node, username, writers, scheduler_name)
