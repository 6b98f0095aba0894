"""What the mutating webhook changes on a pod that asks for a managed device.

1. ``spec.schedulerName`` is set to devshare's scheduler (seed 001's upgrade path), unless the pod
   names another scheduler on purpose: only names in ``replace_schedulers`` (by default the empty
   name and ``default-scheduler``) are replaced.
2. Resource names the scheduler would otherwise have to guess are normalised, in ``requests`` and
   ``limits`` of every container and init container: each dialect's renames
   (:meth:`~devshare.model.dialects.base.Dialect.renames`; today Koordinator's: seed 001's
   ``kubernetes.io/`` spellings become ``koordinator.sh/`` ones, ``gpu: N`` becomes ``gpu-core: N``
   + ``gpu-memory-ratio: N``), through :func:`devshare.model.dialects.normalise_resources`.

Mutation never refuses a pod; it returns RFC 6902 operations and human-readable warnings.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from devshare.model.dialects import normalise_resources
from devshare.server.webhook import jsonpatch

DEFAULT_SCHEDULER = "devshare-scheduler"
REPLACEABLE_SCHEDULERS = ("", "default-scheduler")


def _resource_ops(pod: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    ops: list[dict[str, Any]] = []
    notes: list[str] = []
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return ops, notes
    for field in ("initContainers", "containers"):
        containers = spec.get(field)
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            if not isinstance(container, dict) or not isinstance(container.get("resources"), dict):
                continue
            cname = container.get("name") if isinstance(container.get("name"), str) else str(i)
            for section in ("requests", "limits"):
                old = container["resources"].get(section)
                if not isinstance(old, dict):
                    continue
                new = normalise_resources(old)
                if new == old:
                    continue
                base = ("spec", field, i, "resources", section)
                removed = [k for k in old if k not in new]
                added = [k for k in new if k not in old or new[k] != old[k]]
                ops.extend(jsonpatch.remove(jsonpatch.pointer(*base, k)) for k in removed)
                ops.extend(jsonpatch.add(jsonpatch.pointer(*base, k), new[k]) for k in added)
                note = f"container {cname}: {', '.join(removed)} -> {', '.join(added)}"
                if note not in notes:  # requests and limits usually say the same
                    notes.append(note)
    return ops, notes


def mutation(
    pod: dict[str, Any],
    *,
    scheduler_name: str = DEFAULT_SCHEDULER,
    replace_schedulers: Collection[str] = REPLACEABLE_SCHEDULERS,
) -> tuple[list[dict[str, Any]], list[str]]:
    """JSON patch operations and warnings for a pod that asks for a managed device."""
    ops, notes = _resource_ops(pod)
    warnings = [f"devshare normalised resource names: {n}" for n in notes]
    spec = pod.get("spec")
    if isinstance(spec, dict):
        current = spec.get("schedulerName") or ""
        if isinstance(current, str) and current != scheduler_name and current in replace_schedulers:
            ops.append(jsonpatch.add("/spec/schedulerName", scheduler_name))
            was = f"schedulerName {current!r}" if current else "no schedulerName"
            warnings.append(f"devshare set schedulerName to {scheduler_name!r} (the pod had {was})")
    return ops, warnings
