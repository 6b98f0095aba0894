"""Which container of which pod a kubelet ``Allocate`` call is for.

Kubelet's ``Allocate`` carries only a resource name and the fake device ids kubelet picked (as
many as the container asks for); not the pod. Kubelet admits one pod at a time and, within a pod,
allocates container by container (init containers first, then the others, in spec order), each
resource of a container in turn. So the call is for the **first container, in that order, that
asks for this resource and has not had it allocated yet**, of some pending pod of this node that
carries an unassigned devshare allocation. The rules:

1. Candidate pods: bound to this node, not deleted, not running yet (phase Pending), with a
   ``devshare.io/allocation`` for this node, not yet marked ``devshare.io/assigned``.
2. Per candidate, the first container (init containers, then containers) whose request of the
   resource has not been allocated (neither by this agent since it started, nor in kubelet's
   checkpoint). The pod matches when that container asks for exactly as many units as the call
   carries ids.
3. One matching pod: that one. Several: a pod kubelet is in the middle of (some container or
   resource already allocated) wins, since kubelet finishes a pod before starting the next. Still
   several, all identical (:func:`interchangeable`: the same namespace, containers and asks, and
   allocations of the same shape): the call is served with the devices of one of them, the
   **stand-in** (the first bound: kubelet most likely admits it first), and the agent learns later
   which pod it really was (:mod:`devshare.agent.deviceplugin.allocator`: a trade when it was
   another). Several that differ: the call is refused, naming the candidates; a guess could hand a
   container another pod's GPUs.
4. None: refused, with what was looked for.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import msgspec

from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.codecs import decode_allocation
from devshare.model.errors import InvalidInput
from devshare.model.quantity import quantity_int
from devshare.model.trade import in_group, interchangeable

ASSIGNED = names.ASSIGNED


class AllocateError(Exception):
    """An Allocate call that cannot be served; the message goes back to kubelet (and the pod's events)."""


class ContainerAsk(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    init: bool
    amounts: dict[str, int]  # extended resource name -> units asked (limits, else requests)


class PendingPod(msgspec.Struct, frozen=True, kw_only=True):
    """A pod that may be the subject of an Allocate call."""

    uid: str
    namespace: str
    name: str
    containers: tuple[ContainerAsk, ...]  # in kubelet's allocation order
    app_containers: tuple[str, ...]  # spec.containers names, for container indexes (seed 003)
    annotations: dict[str, str]
    allocation: PodAllocation
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    order: tuple[str, str, str] = ("", "", "")  # when it was bound (PodScheduled, else created), then its name

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class Match(msgspec.Struct, frozen=True, kw_only=True):
    pod: PendingPod
    container: str
    standin: bool = False  # chosen among identical pods: the call may be another one's (module doc)


Served = set[tuple[str, str, str]]  # (pod uid, container name, resource name)


def _amounts(container: Mapping[str, Any], resources: Collection[str]) -> dict[str, int]:
    res = container.get("resources") or {}
    limits = res.get("limits") or {}
    requests = res.get("requests") or {}
    out: dict[str, int] = {}
    for name in resources:
        value = limits.get(name, requests.get(name))
        if value is None:
            continue
        try:
            n = quantity_int(value, field=name)
        except InvalidInput:
            continue
        if n > 0:
            out[name] = n
    return out


def pending_pod(pod: Mapping[str, Any], *, node: str, resources: Collection[str],
                any_phase: bool = False) -> PendingPod | None:
    """The pod as a candidate for Allocate calls on ``node``, or None when it cannot be one
    (``any_phase``: also when it runs or is assigned already)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    if spec.get("nodeName") != node or meta.get("deletionTimestamp"):
        return None
    if status.get("phase") not in (None, "", "Pending") and not any_phase:
        return None
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    if annotations.get(ASSIGNED) == "true" and not any_phase:
        return None
    try:
        allocation = decode_allocation(annotations)
    except InvalidInput:
        return None
    if allocation is None or allocation.node != node:
        return None
    asks: list[ContainerAsk] = []
    for init, key in ((True, "initContainers"), (False, "containers")):
        for c in spec.get(key) or []:
            asks.append(ContainerAsk(name=str(c.get("name", "")), init=init, amounts=_amounts(c, resources)))
    scheduled = ""
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "PodScheduled" and c.get("status") == "True":
            scheduled = str(c.get("lastTransitionTime") or "")
    created = str(meta.get("creationTimestamp") or "")
    return PendingPod(
        uid=str(meta.get("uid", "")),
        namespace=str(meta.get("namespace", "default")),
        name=str(meta.get("name", "")),
        containers=tuple(asks),
        app_containers=tuple(str(c.get("name", "")) for c in spec.get("containers") or []),
        annotations=annotations,
        allocation=allocation,
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        order=(scheduled or created, created, f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"),
    )


def identical(a: PendingPod, b: PendingPod) -> bool:
    """Whether ``a`` and ``b`` may stand in for each other: same namespace, same containers asking the
    same amounts, allocations of the same shape, neither in a group (:mod:`devshare.model.trade`)."""
    return (a.namespace == b.namespace and a.containers == b.containers
            and not in_group(a.labels, a.annotations) and not in_group(b.labels, b.annotations)
            and interchangeable(a.allocation, b.allocation, a.annotations, b.annotations))


def next_container(pod: PendingPod, resource: str, served: Served) -> ContainerAsk | None:
    """The first container of ``pod`` that asks for ``resource`` and has not had it allocated."""
    for c in pod.containers:
        if resource in c.amounts and (pod.uid, c.name, resource) not in served:
            return c
    return None


def complete(pod: PendingPod, served: Served, resources: Collection[str]) -> bool:
    """Every container got every one of ``resources`` it asks for."""
    return all(
        (pod.uid, c.name, r) in served for c in pod.containers for r in c.amounts if r in resources
    )


def match(
    resource: str, count: int, pods: Iterable[PendingPod], served: Served, started: Collection[str] = (),
    *, standins: bool = False,
) -> Match:
    """The container an Allocate call for ``count`` units of ``resource`` is for (module doc).

    ``started``: UIDs of the pods kubelet is in the middle of allocating. ``standins``: serve a call
    that matches several identical pods with the first bound of them (``Match.standin``) rather
    than refuse it.
    """
    candidates: list[tuple[PendingPod, ContainerAsk]] = []
    waiting: list[str] = []
    for pod in pods:
        c = next_container(pod, resource, served)
        if c is None:
            continue
        waiting.append(f"{pod.key}/{c.name} asks {c.amounts[resource]}")
        if c.amounts[resource] == count:
            candidates.append((pod, c))
    if not candidates:
        detail = "; ".join(sorted(waiting)) if waiting else "no pending pod with a devshare allocation asks for it"
        raise AllocateError(
            f"no pod on this node waits for {count} {resource}: {detail}. Was the pod scheduled by devshare "
            "(it needs the devshare.io/allocation annotation for this node)?"
        )
    if len(candidates) > 1:
        current = [pc for pc in candidates if pc[0].uid in started]
        if len(current) == 1:
            candidates = current
    if len(candidates) > 1 and standins and all(identical(candidates[0][0], p) for p, _ in candidates[1:]):
        pod, c = min(candidates, key=lambda pc: pc[0].order)
        return Match(pod=pod, container=c.name, standin=True)
    if len(candidates) > 1:
        names = ", ".join(sorted(f"{p.key}/{c.name}" for p, c in candidates))
        raise AllocateError(
            f"ambiguous Allocate of {count} {resource}: containers of several pending pods ask for exactly "
            f"that ({names}); refusing rather than risk giving a container another pod's devices. Let the "
            "scheduler bind one such pod at a time per node, or recreate the pod."
        )
    pod, c = candidates[0]
    return Match(pod=pod, container=c.name)
