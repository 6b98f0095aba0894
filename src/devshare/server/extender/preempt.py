"""Preempt: of the victims kube-scheduler proposes on each node, the fewest the pod really needs.

kube-scheduler picks victims by its own view (CPU, memory, counts of extended resources) and asks
the extender which of them to keep. For each node, on a scratch copy of that node
(:meth:`ClusterState.scratch`; the live state is never released into and restored):

1. take the victims devshare holds devices for, lowest priority first, and release them one by
   one until :meth:`Scheduler.allocate_on` finds room for the pod; if even all of them do not make
   room, the node is left out of the answer;
2. then try giving each released victim its devices back (highest priority first): one the pod
   still fits without is spared.

Victims devshare holds nothing for (no devices) are kept as kube-scheduler proposed them: they
were chosen for kube-scheduler's own reasons, which devshare cannot judge. ``NumPDBViolations`` is
passed through, capped at the number of victims kept (it counts victims, devshare cannot tell
which of them violate a budget). A pod that asks for no device gets its victims back unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState, PodRecord
from devshare.kube.backend import meta
from devshare.model.allocation import PodAllocation
from devshare.model.errors import InvalidInput
from devshare.model.request import PodRequest
from devshare.server.extender.wire import (
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    MetaPod,
    MetaVictims,
)


class Victim:
    __slots__ = ("index", "key", "priority", "uid")

    def __init__(self, uid: str, key: str | None, priority: int, index: int) -> None:
        self.uid = uid
        self.key = key  # ns/name of a pod the state holds devices for, else None
        self.priority = priority
        self.index = index  # position in kube-scheduler's list (ties keep that order)


def _victims_of(state: ClusterState, args: ExtenderPreemptionArgs) -> dict[str, tuple[list[Victim], int]]:
    """Per node: the proposed victims and the proposed NumPDBViolations."""
    by_uid = {rec.pod.uid: key for key, rec in state.pods.items() if rec.pod.uid}
    out: dict[str, tuple[list[Victim], int]] = {}
    if args.node_name_to_meta_victims is not None:
        for node, mv in args.node_name_to_meta_victims.items():
            vs = []
            for i, p in enumerate(mv.pods):
                found = by_uid.get(p.uid)
                prio = state.pods[found].pod.priority if found is not None else 0
                vs.append(Victim(p.uid, found, prio, i))
            out[node] = (vs, mv.num_pdb_violations)
    if args.node_name_to_victims is not None:
        for node, v in args.node_name_to_victims.items():
            if node in out:
                continue
            vs = []
            for i, pod in enumerate(v.pods):
                m = meta(pod)
                uid = str(m.get("uid") or "")
                key: str | None = f"{m.get('namespace') or 'default'}/{m.get('name')}"
                if key not in state.pods or (uid and state.pods[key].pod.uid not in ("", uid)):
                    key = by_uid.get(uid)
                spec = pod.get("spec") if isinstance(pod.get("spec"), dict) else {}
                given = spec.get("priority") if isinstance(spec, dict) else None
                prio = given if isinstance(given, int) else (state.pods[key].pod.priority if key is not None else 0)
                vs.append(Victim(uid, key, prio, i))
            out[node] = (vs, v.num_pdb_violations)
    return out


def needed_victims(scheduler: Scheduler, pod: PodRequest, node: str, keys: list[str]) -> list[str] | None:
    """The fewest of ``keys`` (ordered lowest priority first) to release so that ``pod`` fits on
    ``node``, or None when releasing all of them is not enough. Asked on a scratch copy of the node
    (:meth:`ClusterState.scratch`): the live state is never touched."""
    what_if = scheduler.state.scratch([node])
    # whether the pod fits does not depend on the policy (it only ranks what fits): the default one
    probe = Scheduler(what_if, settings=scheduler.settings)

    def fits() -> bool:
        return isinstance(probe.allocate_on(pod, node), PodAllocation)

    if fits():
        return []
    released: list[PodRecord] = []
    for key in keys:
        rec = what_if.release(key)
        if rec is None:
            continue
        released.append(rec)
        if fits():
            break
    else:
        return None
    needed: list[str] = []
    for rec in reversed(released):  # highest priority first: the ones most worth sparing
        what_if.add_bound(rec.pod, rec.allocation)
        if not fits():
            what_if.release(rec.pod.key)
            needed.append(rec.pod.key)
    needed.reverse()
    return needed


def preempt(scheduler: Scheduler, args: ExtenderPreemptionArgs, *,
            parse: Callable[[dict[str, Any]], PodRequest]) -> ExtenderPreemptionResult:
    state = scheduler.state
    proposed = _victims_of(state, args)
    try:
        pod = parse(args.pod)
    except InvalidInput:
        return ExtenderPreemptionResult()  # the pod cannot be placed anywhere: no candidates
    out: dict[str, MetaVictims] = {}
    for node, (victims, pdb) in proposed.items():
        if not pod.has_devices():
            kept = victims
        else:
            holders = sorted((v for v in victims if v.key is not None), key=lambda v: (v.priority, v.index))
            needed = needed_victims(scheduler, pod, node, [v.key for v in holders if v.key])
            if needed is None:
                continue
            chosen = set(needed)
            kept = [v for v in victims if v.key is None or v.key in chosen]
        out[node] = MetaVictims(pods=[MetaPod(uid=v.uid) for v in kept], num_pdb_violations=min(pdb, len(kept)))
    return ExtenderPreemptionResult(node_name_to_meta_victims=out)
