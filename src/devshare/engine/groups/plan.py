"""A group's plan (seed 003) and the planner's decisions: what :class:`~devshare.engine.groups.planner.
GroupPlanner` keeps and answers. A plan has one :class:`Slot` per member; a decision is :class:`Bind`
(these members are bound in the state: write them), :class:`Wait` (the gang has not reached its
quorum) or :class:`Refuse`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.request import PodRequest

PLAN = "#plan#"

SlotPhase = Literal["planned", "claimed", "bound", "lost"]


@dataclass
class Slot:
    """One member's place in a plan: a node and devices, and the state record that holds them
    (``held``: the plan's hold, a :class:`PodRecord` with ``hold`` set, or the member's own record).
    The slot's phase is read from that record, never kept beside it (:meth:`GroupPlanner.phase`)."""

    index: int
    node: str | None = None
    allocation: PodAllocation | None = None
    member: str | None = None  # pod key of the member given this slot
    held: str | None = None  # the state key of the record holding the devices (None: no place)


@dataclass
class GroupPlan:
    namespace: str
    name: str
    template: PodRequest  # the first member's request; every member must match it
    replicas: int
    quorum: int  # members that must hold devices before any binds (1 unless a gang)
    expires_at: float
    slots: list[Slot] = field(default_factory=list)
    checked: int = -1  # state version at which every slot was last known valid

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def placeholder(self, index: int) -> str:
        return f"{self.namespace}/{self.name}{PLAN}{index}"

    def slot_of(self, member: str) -> Slot | None:
        for s in self.slots:
            if s.member == member:
                return s
        return None



@dataclass(frozen=True)
class MemberPlacement:
    """A member's node and devices, and what the topology annotation needs."""

    pod: str
    node: str
    allocation: PodAllocation
    visible_gpus: tuple[int, ...]  # the GPUs of the whole group on that node

    @property
    def allocated_gpus(self) -> dict[int, list[int]]:
        """Container index -> GPU minors (containers that got GPUs)."""
        out: dict[int, list[int]] = {}
        for i, c in enumerate(self.allocation.containers):
            minors = [g.minor for g in c.devices if g.type == names.GPU]
            if minors:
                out[i] = minors
        return out


@dataclass(frozen=True)
class Bind:
    """Bind these members now (already bound in the state): the asking member, and at a gang's
    quorum every member that was waiting."""

    members: tuple[MemberPlacement, ...]


@dataclass(frozen=True)
class Wait:
    """Not yet: answer the bind with an error; kube-scheduler retries the pod."""

    reason: str
    node: str | None = None


@dataclass(frozen=True)
class Refuse:
    """The member cannot be placed (or is not a valid member)."""

    reason: str


Decision = Bind | Wait | Refuse


def quorum_of(pod: PodRequest) -> int:
    g = pod.group
    if g is None or g.gang_name is None:
        return 1
    return max(1, min(g.min_available or g.replicas, g.replicas))


def shape_of(pod: PodRequest) -> tuple[object, ...]:
    g = pod.group
    return (pod.containers, pod.cpu_milli, pod.memory_bytes, pod.gpu_models, pod.compute_policy,
            g.replicas if g else None, g.gang_name if g else None, g.min_available if g else None)


def differs(pod: PodRequest, other: PodRequest) -> str | None:
    if shape_of(pod) == shape_of(other):
        return None
    what = []
    if pod.containers != other.containers:
        what.append("containers and device requests")
    if (pod.cpu_milli, pod.memory_bytes) != (other.cpu_milli, other.memory_bytes):
        what.append("CPU/memory")
    if (pod.gpu_models, pod.compute_policy) != (other.gpu_models, other.compute_policy):
        what.append("GPU model or compute policy")
    if shape_of(pod)[5:] != shape_of(other)[5:]:
        what.append("replica/min-available count")
    grp = pod.group.name if pod.group else "?"
    return (f"pod {pod.key} differs from {other.key} in {', '.join(what) or 'its request'}; every member "
            f"of group {grp} must ask for the same resources (members are planned as identical pods)")


