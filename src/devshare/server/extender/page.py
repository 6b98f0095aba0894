"""What ``/ui`` shows beside the cards: the queue (pods waiting and pods refused, with why), the
active policy and configuration, and the quotas by namespace. Each is copied on the event loop in
bounded size (:func:`take_queue`, :func:`take_quotas`) and turned into JSON anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from devshare.config import Configuration
from devshare.engine.quotas import Quotas
from devshare.server.extender.refused import RefusalLog

MAX_QUEUE = 200  # pods listed in the queue (the counts cover them all)
MAX_NAMESPACES = 500  # namespaces listed under quotas
PLAIN = ("cpu", "memory", "ephemeral-storage", "pods")  # resources not shown as a pod's ask


def _asks(pod: Mapping[str, Any]) -> dict[str, str]:
    """The device resources a pod's containers ask (limits, else requests), summed by name as text."""
    out: dict[str, list[str]] = {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
    for c in (spec or {}).get("containers") or []:
        res = c.get("resources") if isinstance(c, dict) else None
        if not isinstance(res, dict):
            continue
        for kind in ("limits", "requests"):
            asked = res.get(kind)
            if isinstance(asked, dict) and asked:
                for name, value in asked.items():
                    if name not in PLAIN and not str(name).startswith("hugepages-"):
                        out.setdefault(str(name), []).append(str(value))
                break
    return {name: "+".join(values) for name, values in out.items()}


def take_queue(pending: Mapping[str, Mapping[str, Any]], refusals: RefusalLog, *,
               limit: int = MAX_QUEUE) -> dict[str, Any]:
    """The pods refused lately (the latest first) and the pending pods of devshare's scheduler
    (waiting longest first), at most ``limit`` in all, each with its ask and its refusals."""
    pods: list[dict[str, Any]] = []
    for key, kept in refusals.recent(limit):
        obj = pending.get(key)
        pods.append({"pod": key, "pending": obj is not None, "since": _created(obj), "asks": _asks(obj or {}),
                     "refusals": [{"verb": r.verb, "at": r.at, "reason": r.reason, "nodes": r.nodes} for r in kept]})
    for key, obj in pending.items():
        if len(pods) >= limit:
            break
        if key not in refusals:
            pods.append({"pod": key, "pending": True, "since": _created(obj), "asks": _asks(obj), "refusals": []})
    waiting_refused = sum(1 for key in pending if key in refusals) if len(refusals) else 0
    return {"pending": len(pending), "refused": len(refusals),
            "total": len(pending) + len(refusals) - waiting_refused, "pods": pods}


def _created(obj: Mapping[str, Any] | None) -> str | None:
    m = obj.get("metadata") if obj is not None else None
    return m.get("creationTimestamp") if isinstance(m, dict) else None


def take_quotas(quotas: Quotas | None, namespace_gpu: Mapping[str, list[int]], *,
                limit: int = MAX_NAMESPACES) -> dict[str, Any]:
    """Per namespace with a quota or GPUs held: GPU compute (percent of one GPU) and memory (bytes),
    used and limit (null: no limit), sorted by name."""
    limits = quotas.limits if quotas is not None else {}
    names = sorted(set(limits) | set(namespace_gpu))
    rows = []
    for ns in names[:limit]:
        q = limits.get(ns)
        core, memory = namespace_gpu.get(ns, (0, 0))
        core_limit = q.core_milli / 10 if q is not None and q.core_milli is not None else None
        rows.append({"namespace": ns, "core": {"used": core / 10, "limit": core_limit},
                     "memory": {"used": memory, "limit": q.memory if q else None}})
    return {"namespaces": rows, "total": len(names), "configured": len(limits)}


def config_summary(cfg: Configuration | None) -> dict[str, Any]:
    """The active policy and the configuration's key values, named as in the file."""
    cfg = cfg or Configuration()
    s = cfg.scheduling
    scheduling = {f.encode_name: getattr(s, f.name) for f in msgspec.structs.fields(s)}
    policy = cfg.policies.devshare if s.node_policy == "devshare" else cfg.policies.binpack
    options = {f.encode_name: getattr(policy, f.name) for f in msgspec.structs.fields(policy)
               if getattr(policy, f.name) is not None}
    return {"policy": s.node_policy, "cardPolicy": s.card_policy, "scheduling": scheduling,
            "policyOptions": options,
            "disabledDeviceTypes": sorted(cfg.device_types.disabled()),
            "disabledDialects": sorted(cfg.disabled_dialects()),
            "quotas": len(cfg.quotas)}
