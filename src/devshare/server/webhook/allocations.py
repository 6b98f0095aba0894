"""Who may write an allocation: the annotations that say where a pod's devices are
(:func:`devshare.model.dialects.is_allocation_annotation`) are devshare's to write. The extender writes
them with the Binding (``pods/binding``, which no pod webhook sees) and the node agent marks pods
assigned; anyone else who creates a pod carrying them, or changes them on an existing pod, is
refused. A pod created with ``spec.nodeName`` and an allocation of its own would otherwise be
counted on its card (issue 12: GPU 0 at 165%).

The writers are usernames (``system:serviceaccount:<namespace>:<name>`` for ServiceAccounts), by
default devshare's own: ``devshare-scheduler`` (the extender) and ``devshare-agent`` in
``devshare-system`` (``devshare webhook --allocation-writer`` replaces them)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from devshare.model.dialects import is_allocation_annotation

SYSTEM_NAMESPACE = "devshare-system"
DEFAULT_WRITERS = (f"system:serviceaccount:{SYSTEM_NAMESPACE}:devshare-scheduler",
                   f"system:serviceaccount:{SYSTEM_NAMESPACE}:devshare-agent")
REASON = "allocation-write"  # the rejections metric's reason class


def allocation_annotations(obj: Any) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(annotations, dict):
        return {}
    return {k: v for k, v in annotations.items() if isinstance(k, str) and is_allocation_annotation(k)}


def refuse_allocation_write(operation: str, username: str, obj: Any, old: Any,
                            writers: Collection[str]) -> str | None:
    """Why this CREATE or UPDATE of a pod may not go through (None when it may)."""
    if username in writers or operation not in ("CREATE", "UPDATE"):
        return None
    new = allocation_annotations(obj)
    if operation == "CREATE":
        if not new:
            return None
        return (f"annotation(s) {', '.join(sorted(new))} may only be written by devshare ({', '.join(writers)}), "
                f"not by {username or 'an anonymous user'}: they say which devices the pod holds, and devshare "
                "writes them itself when it binds the pod. Create the pod without them (and without spec.nodeName)")
    before = allocation_annotations(old)
    changed = sorted(k for k in new.keys() | before.keys() if new.get(k) != before.get(k))
    if not changed:
        return None
    return (f"annotation(s) {', '.join(changed)} may only be changed by devshare ({', '.join(writers)}), "
            f"not by {username or 'an anonymous user'}: they record which devices the pod holds. Leave them as "
            "they are (delete and re-create the pod to have it placed again)")
