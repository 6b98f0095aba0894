"""A trade: two identical pods on one node exchange their allocations.

kubelet's ``Allocate`` does not say which pod it is for. When several pending pods of a node ask for
exactly the same thing, the node agent hands the call the devices of one of them (the stand-in)
and learns afterwards, from kubelet's checkpoint, which pod the container really belongs to. When
that is another pod, the two pods *trade*: each pod's allocation annotations are rewritten to
what the other one held, so that every annotation records the devices its containers really got.
A trade is two writes (one per pod), each tagged ``devshare.io/trade: <partner uid>``; the
scheduler applies the two together (:mod:`devshare.engine.trades`), the webhook lets only the node
agent make them, and only as exact exchanges (:mod:`devshare.server.webhook.allocations`).

This module is the one definition of what a trade exchanges and of which pods may trade.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.dialects import aliyun, allocation_annotations, allocation_prefixes

TRADE = names.TRADE
# the allocation annotations that belong to the pod, not to its devices: a trade leaves them
MARKS = (names.ASSIGNED, aliyun.ALIYUN_ASSIGNED)  # the node agent's marks
KEPT = frozenset({*MARKS, aliyun.ALIYUN_ASSUME_TIME})  # and when the pod was bound


_keys: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())  # (the registry's, less KEPT)


def traded_keys() -> frozenset[str]:
    """The annotation keys a trade exchanges (besides those under :func:`traded_prefixes`)."""
    global _keys
    registry = allocation_annotations()
    if _keys[0] is not registry:  # a dialect was registered since
        _keys = (registry, registry - KEPT)
    return _keys[1]


def traded_prefixes() -> tuple[str, ...]:
    return allocation_prefixes()


def is_traded(key: str) -> bool:
    return (key in traded_keys() or key.startswith(traded_prefixes())) and key not in KEPT


def traded(annotations: Mapping[str, Any]) -> dict[str, str]:
    """The annotations of a pod that a trade exchanges."""
    keys, prefixes = traded_keys(), traded_prefixes()
    return {k: str(v) for k, v in annotations.items()
            if isinstance(k, str) and (k in keys or k.startswith(prefixes)) and k not in KEPT}


def leg(mine: Mapping[str, Any], partner: Mapping[str, Any], partner_uid: str) -> dict[str, str | None]:
    """The merge patch of a pod's annotations (``mine``) taking ``partner``'s allocation: the
    partner's traded annotations, ours it lacks removed (None), and the tag."""
    theirs = traded(partner)
    out: dict[str, str | None] = {k: None for k in traded(mine) if k not in theirs}
    out.update(theirs)
    out[TRADE] = partner_uid
    return out


def shape(alloc: PodAllocation) -> tuple[Any, ...]:
    """What an allocation gives, whatever the devices: per container its name and, per grant, the
    type and amounts (not the minor or id)."""
    return (alloc.node, tuple((c.name, tuple((g.type, g.core_milli, g.memory, g.memory_ratio_milli)
                                             for g in c.devices)) for c in alloc.containers))


def interchangeable(a: PodAllocation, b: PodAllocation, a_annotations: Mapping[str, Any],
                    b_annotations: Mapping[str, Any]) -> bool:
    """Whether two pods' allocations can be exchanged: the same node, containers and amounts, and the
    same traded annotation keys (the same dialect)."""
    return shape(a) == shape(b) and set(traded(a_annotations)) == set(traded(b_annotations))


def in_group(labels: Mapping[str, Any], annotations: Mapping[str, Any]) -> bool:
    """Pods of a seed-003 group or gang never trade (their plan ties each member to its devices)."""
    return names.GROUP_NAME in labels or names.GANG_NAME in annotations or names.TOPOLOGY_GPU in annotations
