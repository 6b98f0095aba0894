"""Whether an allocation may be counted now: the reserve's check (:func:`why_not`, every rule of the
filter's own predicate, :mod:`devshare.engine.admit`) and the rule for allocations already written on
pods (:func:`overbooking`: only a card's capacity). Both read the state, neither changes it.
"""

from __future__ import annotations

from collections.abc import Mapping

from devshare.engine.admit import Ask, Card, Reason, card_reason, describe
from devshare.engine.nodetables import NodeTables
from devshare.engine.records import PodRecord
from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.request import PodRequest


def why_not(state: NodeTables, pods: Mapping[str, PodRecord], pod: PodRequest, alloc: PodAllocation, *,
            ignore: str | None = None) -> str | None:
    """Why ``alloc`` cannot be added to what ``pods`` hold of ``state`` now (None when it fits).
    ``ignore``: a pod key not to count."""
    row = state.row_of.get(alloc.node)
    if row is None:
        return f"node {alloc.node} is not known"
    if not state.active[row]:
        return f"node {alloc.node} is unschedulable"
    back = pods.get(ignore) if ignore else None
    if back is not None and back.allocation.node != alloc.node:
        back = None  # counted on another node: nothing of it to take back here
    cpu, memory = pod.cpu_milli, pod.memory_bytes
    if back is not None:  # the same pod's record: its CPU and memory are counted already
        cpu, memory = cpu - back.pod.cpu_milli, memory - back.pod.memory_bytes
    if state.cpu_short(row, cpu):
        return f"node {alloc.node}: not enough CPU"
    if state.memory_short(row, memory):
        return f"node {alloc.node}: not enough memory"
    # per card: what the allocation adds (compute, memory, containers, whole), judged by the
    # filter's own predicate (devshare.engine.admit)
    for u in alloc.usage():
        dtype, minor, core, mem, slots, whole = u.type, u.minor, u.core_milli, u.memory, u.slots, u.whole
        t = state.tables.get(dtype)
        col = t.column_of(row, minor) if t is not None else -1
        if t is None or col < 0:
            return describe(Reason.ABSENT, f"{dtype} {minor}", total_core=0, total_mem=0, free_core=0,
                            free_mem=0, slots=0, core=core, memory=mem, max_containers=state.max_containers)
        used_core = int(t.used_core[row, col])
        used_mem = int(t.used_mem[row, col])
        used_slots = int(t.used_slots[row, col])
        if back is not None:
            for bu in back.allocation.usage():
                if bu.type == dtype and bu.minor == minor:
                    used_core -= bu.core_milli
                    used_mem -= bu.memory
                    used_slots -= bu.slots
        total_core, total_mem = int(t.total_core[row, col]), int(t.total_mem[row, col])
        sel = pod.gpu_selection if dtype == names.GPU else None
        excluded = sel is not None and not sel.allows(t.ids[row][col], state.card_model(t, row, col))
        card = Card(True, bool(t.healthy[row, col]), bool(t.blocked[row, col]), total_core, total_mem,
                    total_core - used_core, total_mem - used_mem, used_slots, excluded)
        code = card_reason(card, Ask(core, mem, bool(whole), slots, state.max_containers))
        if code:
            return describe(code, f"{dtype} {minor}", total_core=total_core, total_mem=total_mem,
                            free_core=card.free_core, free_mem=card.free_mem, slots=used_slots, core=core,
                            memory=mem, max_containers=state.max_containers)
    return None


def overbooking(state: NodeTables, pods: Mapping[str, PodRecord], alloc: PodAllocation, *,
                ignore: str | None = None) -> str | None:
    """Whether ``alloc``, added to what is counted now, would book a card beyond its compute or
    memory (None when it would not, or when its node or cards are unknown: nothing to judge
    against). Unlike :func:`why_not`, health, cordons, containers per card and node CPU do not
    matter: this is the rule for allocations already written on pods. ``ignore``: a pod key not
    to count (the same pod's earlier record)."""
    row = state.row_of.get(alloc.node)
    if row is None:
        return None
    back = pods.get(ignore) if ignore else None
    for u in alloc.usage():
        dtype, minor, core, mem = u.type, u.minor, u.core_milli, u.memory
        t = state.tables.get(dtype)
        col = t.column_of(row, minor) if t is not None else -1
        if t is None or col < 0:
            continue
        used_core, used_mem = int(t.used_core[row, col]), int(t.used_mem[row, col])
        if back is not None and back.allocation.node == alloc.node:
            for bu in back.allocation.usage():
                if bu.type == dtype and bu.minor == minor:
                    used_core -= bu.core_milli
                    used_mem -= bu.memory
        total_core, total_mem = int(t.total_core[row, col]), int(t.total_mem[row, col])
        if used_core + core > total_core or (total_mem and used_mem + mem > total_mem):
            return (f"{dtype} {minor} of node {alloc.node} would hold {(used_core + core) / 10:g}% compute and "
                    f"{(used_mem + mem) / 2**30:.1f} GiB of {total_core / 10:g}% and {total_mem / 2**30:.1f} GiB "
                    f"({used_core / 10:g}% and {used_mem / 2**30:.1f} GiB already held)")
    return None
