"""Pod groups and gangs (seed 003): a plan for the whole group, held in the cluster state until its
members come, and all-or-nothing binding for gangs.

Lifecycle of a group ``<ns>/<name>`` (pods with the same ``GroupRef``; members must be identical):

- The first member that asks (:meth:`GroupPlanner.assign`, from the extender's filter/prioritize)
  makes the plan: :func:`devshare.engine.groups.layout.plan_layout` over the nodes it may use. Each planned
  member's devices are held in the state at once by a hold: a record that says it is one
  (``PodRecord.group`` is the group key; displayed as ``<ns>/<name>#plan#<i>``), assumed until the
  plan expires, so no other pod can take them. A slot points at the record holding its devices
  (``Slot.held``: the hold, or the member's own record once it claims) and its phase is read from
  that record (:meth:`GroupPlanner.phase`), never kept beside it. The member is given a slot; the
  extender scores the planned node highest and every other node 0; filter passes the planned node
  alone.
- A member's bind (:meth:`GroupPlanner.claim`) turns its slot's placeholder into the member's own
  reservation. A group binds as soon as ``quorum`` members hold one: 1 for a plain group, the gang's
  ``min-available`` for a gang. Until then the bind is answered with :class:`Wait` (the extender
  answers kube-scheduler's bind with an error, and kube-scheduler retries). When the quorum is
  reached every claimed member is bound in the state together (:class:`Bind` lists them all: the
  caller writes their annotations and binds each), so a gang is never partly bound. Members that
  come after that bind at once.
- Plans are checked whenever a member asks: a slot whose node is gone, cordoned, or whose devices no
  longer fit (taken, unhealthy) is invalid. If no member of the group is bound yet the whole group is
  planned again; otherwise only the invalid slots are.
- :meth:`GroupPlanner.expire` drops plans past their time: every placeholder and every claimed but
  unbound member reservation is released. Bound members stay; later members are then planned one
  by one. A plan's time is pushed back (``now + ttl``) each time a new member claims, never by a
  member asking again, so a gang that cannot complete does expire.

Bound members are read from the state (records whose pod carries the group), so after a restart
the planner knows what is bound from the annotations alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from devshare.engine.groups.layout import Layout, gpu_minors, plan_layout
from devshare.engine.groups.plan import (
    PLAN,
    Bind,
    Decision,
    GroupPlan,
    MemberPlacement,
    Refuse,
    Slot,
    SlotPhase,
    Wait,
    differs,
    quorum_of,
)
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.records import Conflict, PodRecord
from devshare.engine.scheduler import FilterOutcome, Scheduler
from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.request import PodRequest

DEFAULT_PLAN_TTL = 120.0  # seconds a plan holds devices for members that have not come


class GroupPlanner:
    """Group plans over a :class:`Scheduler`'s state (see the module docstring)."""

    def __init__(self, scheduler: Scheduler, *, ttl: float = DEFAULT_PLAN_TTL,
                 lifecycle: Lifecycle | None = None) -> None:
        self.scheduler = scheduler
        self.state = scheduler.state
        self.lifecycle = lifecycle or Lifecycle(scheduler)
        self.ttl = ttl
        self.plans: dict[str, GroupPlan] = {}

    # ------------------------------------------------------------------ queries
    def members_in_state(self, namespace: str, name: str) -> dict[str, PodRecord]:
        """Records of the group's pods in the state (placeholders excluded)."""
        return {k: r for k, r in self.state.pods.items()
                if r.pod.group is not None and r.pod.group.name == name and r.pod.namespace == namespace
                and r.group is None}

    def bound_members(self, namespace: str, name: str) -> list[str]:
        return sorted(k for k, r in self.members_in_state(namespace, name).items() if r.phase == "bound")

    def visible_gpus(self, namespace: str, name: str, node: str) -> tuple[int, ...]:
        """GPUs given to the group on ``node``: its members' and its placeholders'."""
        out: set[int] = set()
        for rec in self.state.pods.values():
            g = rec.pod.group
            if g is not None and g.name == name and rec.pod.namespace == namespace and rec.allocation.node == node:
                out.update(gpu_minors(rec.allocation))
        return tuple(sorted(out))

    def placement(self, namespace: str, group: str, key: str, node: str, alloc: PodAllocation) -> MemberPlacement:
        return MemberPlacement(key, node, alloc, self.visible_gpus(namespace, group, node))

    # ------------------------------------------------------------------ holdings
    def phase(self, s: Slot) -> SlotPhase:
        """Read from the record holding the slot's devices: ``planned`` (the plan's hold),
        ``claimed`` (the member's own assumed record), ``bound`` (the member's record is bound),
        ``lost`` (nothing holds a place)."""
        if s.held is None:
            return "lost"
        if s.held != s.member:
            return "planned"
        rec = self.state.pods.get(s.held)
        return "bound" if rec is not None and rec.phase == "bound" else "claimed"

    def _placeholder_pod(self, plan: GroupPlan, index: int) -> PodRequest:
        return msgspec.structs.replace(plan.template, name=f"{plan.name}{PLAN}{index}", uid="")

    def _assume(self, plan: GroupPlan, s: Slot, pod: PodRequest, now: float) -> str | None:
        """Assume ``s.allocation`` for ``pod`` (a hold when ``pod`` is the plan's placeholder) until the plan
        expires; the reason when it fails."""
        assert s.allocation is not None
        try:
            self.lifecycle.assume(pod, s.allocation, now=now, expires_at=max(plan.expires_at, now), hold="group",
                                  group=plan.key if pod.key != s.member else None)
        except Conflict as e:
            return str(e)
        s.held = pod.key
        return None

    def _drop(self, plan: GroupPlan, s: Slot) -> None:
        """Release what the slot holds, unless bound."""
        if s.held is not None and self.phase(s) != "bound":
            self.lifecycle.release(s.held)
            s.held = None
            s.node = None
            s.allocation = None

    def _invalid(self, plan: GroupPlan, s: Slot) -> str | None:
        """Why a planned or claimed slot is no longer good (None when it is)."""
        if self.phase(s) not in ("planned", "claimed"):
            return None
        key = s.held
        rec = self.state.pods.get(key) if key else None
        if rec is None or s.allocation is None or rec.allocation != s.allocation:
            return "its reservation is gone (expired)"
        return self.state.why_not(rec.pod, s.allocation, ignore=key)

    def _set_expiry(self, plan: GroupPlan, expires_at: float) -> None:
        plan.expires_at = expires_at
        for s in plan.slots:
            key = s.held if self.phase(s) in ("planned", "claimed") else None
            if key is not None:
                self.lifecycle.extend(key, expires_at)

    # ------------------------------------------------------------------ planning
    def _lay_out(self, plan: GroupPlan, count: int, nodes: Sequence[str] | None, now: float) -> Layout | str:
        """Plan ``count`` members over ``nodes`` into fresh slots (all placeholders reserved)."""
        layout = plan_layout(self.scheduler, plan.template, count, self.state.node_rows(nodes))
        if not layout.allocations:
            why = self.scheduler.why_unschedulable(plan.template, nodes) or "no node fits"
            return f"group {plan.key}: no member fits now: {why}"
        if len(layout.allocations) < plan.quorum:
            return (f"group {plan.key}: {len(layout.allocations)} of {count} members fit now, the gang needs "
                    f"{plan.quorum} together; nothing is held")
        plan.slots = []
        for i, alloc in enumerate(layout.allocations):
            s = Slot(i, alloc.node, alloc)
            plan.slots.append(s)
            failed = self._assume(plan, s, self._placeholder_pod(plan, i), now)
            if failed is not None:  # cannot happen: the layout was computed on this state
                for t in plan.slots:
                    self._drop(plan, t)
                plan.slots = []
                return f"group {plan.key}: planned devices could not be held ({failed})"
        plan.slots.extend(Slot(len(plan.slots) + i) for i in range(layout.missing))
        return layout

    def _place_one(self, plan: GroupPlan, s: Slot, nodes: Sequence[str] | None, now: float) -> str | None:
        """Place one slot on its own (the group is partly bound): the scheduler's best node."""
        self._drop(plan, s)
        pod = self._placeholder_pod(plan, s.index)
        p = self.scheduler.place(pod, nodes)
        if p is None:
            return self.scheduler.why_unschedulable(pod, nodes) or "no node fits"
        s.node, s.allocation = p.node, p.allocation
        why = self._assume(plan, s, pod, now)
        if why is not None:
            s.node, s.allocation = None, None
        return why

    def _replan_whole(self, plan: GroupPlan, nodes: Sequence[str] | None, now: float) -> str | None:
        for s in plan.slots:
            self._drop(plan, s)
        plan.slots = []
        out = self._lay_out(plan, plan.replicas, nodes, now)
        return out if isinstance(out, str) else None

    def _refresh(self, plan: GroupPlan, bound: int, nodes: Sequence[str] | None, now: float) -> str | None:
        """Re-plan what is no longer valid: everything when nothing is bound, else slot by slot."""
        if plan.checked == self.state.version:
            return None  # nothing changed since the plan was last checked (or changed by it)
        bad = [s for s in plan.slots if self._invalid(plan, s) is not None]
        if not bad:
            plan.checked = self.state.version
            return None
        if bound == 0:
            return self._replan_whole(plan, nodes, now)
        for s in bad:
            self._place_one(plan, s, nodes, now)
        return None

    def _new_plan(self, pod: PodRequest, bound: int, nodes: Sequence[str] | None, now: float) -> GroupPlan | str:
        g = pod.group
        assert g is not None
        template = msgspec.structs.replace(pod, uid="")
        plan = GroupPlan(pod.namespace, g.name, template, g.replicas, quorum_of(pod), now + self.ttl)
        if bound == 0:
            out = self._lay_out(plan, plan.replicas, nodes, now)
            if isinstance(out, str):
                return out
        self.plans[plan.key] = plan
        return plan

    # ------------------------------------------------------------------ verbs
    def assign(self, pod: PodRequest, nodes: Sequence[str] | None = None, *, now: float) -> MemberPlacement | Refuse:
        """The member's planned node and devices (planning the group first when needed)."""
        g = pod.group
        if g is None:
            return Refuse(f"pod {pod.key} is not in a group")
        key = pod.key
        rec = self.state.pods.get(key)
        if rec is not None and rec.phase == "bound":
            return self.placement(pod.namespace, g.name, key, rec.allocation.node, rec.allocation)
        gkey = f"{pod.namespace}/{g.name}"
        members = self.members_in_state(pod.namespace, g.name)
        bound = sum(1 for r in members.values() if r.phase == "bound")
        plan = self.plans.get(gkey)
        first = plan.template if plan is not None else next(
            (r.pod for r in members.values() if r.pod.key != key), None)
        if first is not None:
            why = differs(pod, first)
            if why is not None:
                return Refuse(why)
        if plan is None:
            made = self._new_plan(pod, bound, nodes, now)
            if isinstance(made, str):
                return Refuse(made)
            plan = made
        else:
            why = self._refresh(plan, bound, nodes, now)
            if why is not None:
                self._forget_plan(plan)
                return Refuse(why)
        allowed = set(nodes) if nodes is not None else None
        s = plan.slot_of(key)
        if s is None:
            free = [t for t in plan.slots if t.member is None and self.phase(t) in ("planned", "lost")]
            if not free:
                if bound + len([t for t in plan.slots if self.phase(t) != "bound"]) >= plan.replicas:
                    return Refuse(f"group {gkey} already has its {plan.replicas} members "
                                  f"(label {names.GROUP_REPLICA})")
                s = Slot(max((t.index for t in plan.slots), default=-1) + 1)
                plan.slots.append(s)
                free = [s]
            s = next((t for t in free if self.phase(t) == "planned" and (allowed is None or t.node in allowed)),
                     free[0])
            s.member = key
        if self.phase(s) in ("planned", "claimed") and allowed is not None and s.node not in allowed:
            # kube-scheduler says this member cannot use its planned node
            if bound == 0 and self.phase(s) == "planned":
                why = self._replan_whole(plan, nodes, now)
                if why is not None:
                    self._forget_plan(plan)
                    return Refuse(why)
                free = [t for t in plan.slots if self.phase(t) == "planned"]
                s = free[0] if free else plan.slots[0]
                s.member = key
            else:
                self._drop(plan, s)
        if self.phase(s) == "lost":
            why = self._place_one(plan, s, nodes, now)
            if why is not None:
                return Refuse(f"group {gkey}: no place for member {key}: {why}")
        assert s.node is not None and s.allocation is not None
        plan.checked = self.state.version  # every slot is valid, placed, or lost by now
        return self.placement(plan.namespace, plan.name, key, s.node, s.allocation)

    def filter(self, pod: PodRequest, nodes: Sequence[str] | None, *, now: float) -> FilterOutcome:
        """The member's planned node passes; every other node fails with the reason."""
        names_ = list(nodes) if nodes is not None else sorted(self.state.row_of)
        out = FilterOutcome()
        r = self.assign(pod, nodes, now=now)
        for n in names_:
            if isinstance(r, Refuse):
                out.failed[n] = r.reason
            elif n == r.node:
                out.passed.append(n)
            else:
                out.failed[n] = f"group {pod.group.name if pod.group else ''}: member planned on node {r.node}"
        return out

    def planned_node(self, pod: PodRequest, nodes: Sequence[str] | None, *, now: float) -> str | None:
        """The member's planned node (None when it has no place): the extender scores it highest."""
        r = self.assign(pod, nodes, now=now)
        return r.node if isinstance(r, MemberPlacement) else None

    def claim(self, pod: PodRequest, node: str | None = None, *, now: float) -> Decision:
        """The member asks to bind (on ``node``, when given). See the module docstring."""
        r = self.assign(pod, None, now=now)
        if isinstance(r, Refuse):
            return r
        key = pod.key
        rec = self.state.pods.get(key)
        if rec is not None and rec.phase == "bound":
            return Bind((r,))
        assert pod.group is not None
        plan = self.plans[f"{pod.namespace}/{pod.group.name}"]
        s = plan.slot_of(key)
        assert s is not None and s.allocation is not None
        if node is not None and s.node != node:
            return Wait(f"group {plan.key}: member {key} is planned on node {s.node}, not {node}", s.node)
        if self.phase(s) == "planned":
            assert s.held is not None
            self.lifecycle.release(s.held)
            s.held = None
            self._set_expiry(plan, max(plan.expires_at, now + self.ttl))
            why = self._assume(plan, s, pod, now)
            if why is not None:
                self._assume(plan, s, self._placeholder_pod(plan, s.index), now)
                return Refuse(f"group {plan.key}: member {key} cannot take its planned devices: {why}")
        plan.checked = self.state.version
        bound = len(self.bound_members(plan.namespace, plan.name))
        claimed = [t for t in plan.slots if self.phase(t) == "claimed"]
        if bound + len(claimed) < plan.quorum:
            return Wait(f"gang {plan.name}: {bound + len(claimed)} of {plan.quorum} members have their "
                        f"devices; no member binds until {plan.quorum} do", s.node)
        out: list[MemberPlacement] = []
        for t in sorted(claimed, key=lambda t: (t.member != key, t.index)):
            assert t.member is not None and t.node is not None and t.allocation is not None
            self.lifecycle.confirm(self.state.pods[t.member].pod, t.allocation)
            out.append(self.placement(plan.namespace, plan.name, t.member, t.node, t.allocation))
        return Bind(tuple(out))

    def schedule(self, pod: PodRequest, nodes: Sequence[str] | None = None, *, now: float) -> Decision:
        """assign + claim in one step (``devshare schedule``, the simulator)."""
        r = self.assign(pod, nodes, now=now)
        if isinstance(r, Refuse):
            return r
        return self.claim(pod, r.node, now=now)

    def bind_failed(self, key: str, *, now: float) -> bool:
        """The API binding of a member failed. A plain group's member goes back to its slot's
        placeholder (True); a gang member stays bound (False): the gang's decision stands, the
        caller retries the binding (or calls :meth:`forget` when the pod is gone)."""
        for plan in self.plans.values():
            s = plan.slot_of(key)
            if s is None or self.phase(s) != "bound":
                continue
            if plan.quorum > 1:
                return False
            rec = self.state.pods.get(key)
            self.lifecycle.release(key)
            s.held = None
            if rec is None or s.allocation is None:
                return True
            if self._assume(plan, s, self._placeholder_pod(plan, s.index), now) is not None:
                s.node, s.allocation = None, None
            return True
        rec = self.state.pods.get(key)
        if rec is not None and rec.pod.group is not None and quorum_of(rec.pod) == 1:
            self.lifecycle.release(key)
            return True
        return False

    def forget(self, key: str) -> None:
        """The member pod is gone: release what it holds; its slot waits for a replacement."""
        self.lifecycle.release(key)
        for plan in self.plans.values():
            s = plan.slot_of(key)
            if s is not None:
                if s.held == key:  # the member's own record held the devices: the slot has no place now
                    s.held, s.node, s.allocation = None, None, None
                s.member = None

    def drop(self, group: str) -> bool:
        """Drop the plan of ``group`` (``<ns>/<name>``: no pod of it exists any more) with every
        placeholder and unbound claim it held. True when there was one."""
        plan = self.plans.get(group)
        if plan is None:
            return False
        self._forget_plan(plan)
        return True

    def _forget_plan(self, plan: GroupPlan) -> None:
        for s in plan.slots:
            self._drop(plan, s)
        self.plans.pop(plan.key, None)

    def expire(self, now: float) -> list[str]:
        """Drop plans past their time (every placeholder and unbound claim released). Returns their keys."""
        gone = [k for k, p in self.plans.items() if p.expires_at <= now]
        for k in gone:
            self._forget_plan(self.plans[k])
        return gone
