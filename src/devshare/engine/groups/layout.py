"""Seed 003 group layout: which nodes a pod group goes to, and which GPUs each member gets there.

:func:`plan_layout` places ``count`` identical members (the group's request, ``template``):

1. Capacity: how many members each candidate node can take now. For members asking only whole
   GPUs (the seed's case) this is one numpy expression over the cluster arrays: free whole GPUs
   per node (usable, nothing on them) divided by the GPUs one member takes, capped by node CPU and
   memory where tracked; nodes a single member cannot use at all (cordoned, wrong GPU model or
   policy) are dropped by one batched :meth:`Scheduler.evaluate`. Other requests (fractions of
   GPUs, other device types) are probed node by node with the scheduler's own per-node fit, on a
   scratch copy of those nodes (:func:`what_if`), never in the live state.
2. Nodes: the fewest nodes whose capacities add up to the group (one node if one can hold it
   all, then two, ...); among those, the set that leaves the fewest free GPUs behind on the chosen
   nodes (a small knapsack over the few distinct capacities), then the lowest node rank.
3. GPUs: on each chosen node the union of its members' GPUs is taken as one set, the free set
   with the largest bottleneck bandwidth (:mod:`devshare.engine.topology`), then split among the
   members: each in turn takes the best-bottleneck subset of what is left. Without a bandwidth
   matrix the lowest free GPUs are taken.

When fewer than ``count`` members fit anywhere, the layout holds as many as fit (``missing`` says
how many are left out); the caller decides whether that is enough (a gang needs its quorum).
The layout is computed without changing the state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import msgspec
import numpy as np
import numpy.typing as npt

from devshare.engine.fit import sum_per_row
from devshare.engine.handlers.base import SUCCESS, grant_for
from devshare.engine.lifecycle import WhatIf
from devshare.engine.records import Conflict
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.engine.topology import mask_of, solver_for
from devshare.model import names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.request import PodRequest

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]

PROBE = "#probe#"


@dataclass(frozen=True)
class Layout:
    """Where each planned member goes. ``allocations`` are grouped by node, in node order."""

    allocations: tuple[PodAllocation, ...]
    missing: int  # members that fit nowhere
    leftover: float  # free GPUs left on the chosen nodes once the members are placed

    @property
    def nodes(self) -> tuple[str, ...]:
        out: list[str] = []
        for a in self.allocations:
            if a.node not in out:
                out.append(a.node)
        return tuple(out)


def whole_gpus(pod: PodRequest) -> int | None:
    """Whole GPUs one member takes when it asks for whole GPUs and nothing else (the vectorized
    path); None otherwise."""
    total = 0
    for c in pod.containers:
        for d in c.devices:
            if d.type != names.GPU or not d.whole:
                return None
            total += d.count
    return total if total > 0 else None


def untouched_gpus(state: ClusterState, rows: Ints) -> npt.NDArray[np.bool_]:
    """``[len(rows), width]``: GPUs that a whole-GPU ask may take (usable and nothing on them)."""
    t = state.tables.get(names.GPU)
    if t is None:
        return np.zeros((len(rows), 0), np.bool_)
    return np.asarray(
        t.usable()[rows] & (t.used_core[rows] == 0) & (t.used_mem[rows] == 0) & (t.used_slots[rows] == 0)
    )


def free_gpus(state: ClusterState, rows: Ints) -> Floats:
    """Free GPU capacity per node, in GPUs (compute of usable GPUs not in use)."""
    t = state.tables.get(names.GPU)
    if t is None:
        return np.zeros(len(rows), np.float64)
    free = np.where(t.usable()[rows], np.maximum(t.total_core[rows] - t.used_core[rows], 0), 0)
    return np.asarray(sum_per_row(free) / 1000.0, np.float64)


# ---------------------------------------------------------------------------------- capacity


def _node_limits(state: ClusterState, pod: PodRequest, rows: Ints, cap: Ints) -> Ints:
    """``cap`` lowered by the node CPU and memory the members need, where the state tracks them."""
    big = np.iinfo(np.int64).max
    if pod.cpu_milli:
        total = state.cpu_total[rows]
        room = np.where(total > 0, np.maximum(total - state.cpu_used[rows], 0) // pod.cpu_milli, big)
        cap = np.minimum(cap, room)
    if pod.memory_bytes:
        total = state.mem_total[rows]
        room = np.where(total > 0, np.maximum(total - state.mem_used[rows], 0) // pod.memory_bytes, big)
        cap = np.minimum(cap, room)
    return cap


def _probe_pod(template: PodRequest, i: int) -> PodRequest:
    return msgspec.structs.replace(template, name=f"{template.name}{PROBE}{i}", uid="")


def what_if(scheduler: Scheduler, nodes: list[str]) -> Scheduler:
    """A scheduler over a scratch copy of ``nodes`` (:meth:`ClusterState.scratch`), with the same
    policy and settings: members are tried there, never reserved in the live state. A node's answer
    depends only on that node, so what is chosen there is what the live state would choose."""
    return Scheduler(scheduler.state.scratch(nodes), policy=scheduler.policy, settings=scheduler.settings)


def sequential_fit(scheduler: Scheduler, template: PodRequest, node: str, n: int) -> list[PodAllocation]:
    """Up to ``n`` members placed one after another on ``node`` with the scheduler's own per-node
    fit (each sees the ones before it). ``scheduler`` is a :func:`what_if` one: the probes it
    reserves are released again, so it can be asked about the next node."""
    tried = WhatIf(scheduler.state)
    placed: list[PodAllocation] = []
    keys: list[str] = []
    try:
        for i in range(n):
            probe = _probe_pod(template, i)
            alloc = scheduler.allocate_on(probe, node)
            if isinstance(alloc, str):
                break
            try:
                tried.take(probe, alloc)
            except Conflict:
                break
            keys.append(probe.key)
            placed.append(alloc)
    finally:
        for k in keys:
            tried.release(k)
    return placed


def capacities(scheduler: Scheduler, template: PodRequest, rows: Ints, limit: int) -> Ints:
    """How many members (at most ``limit``) each node of ``rows`` can take now."""
    state = scheduler.state
    cap = np.zeros(len(rows), np.int64)
    if len(rows) == 0 or limit <= 0:
        return cap
    g = whole_gpus(template)
    if g is not None:
        cap = sum_per_row(untouched_gpus(state, rows)) // g
        cap = np.minimum(_node_limits(state, template, rows, cap), limit)
    else:
        cap[:] = limit
    live = np.flatnonzero(cap > 0)
    if live.size:
        # only "can one member use this node at all" matters here: skip the per-node GPU set choice
        quick = Scheduler(state, policy=scheduler.policy, settings=replace(scheduler.settings, topology=False))
        ev = quick.evaluate(template, rows[live])
        cap[live[ev.codes != SUCCESS]] = 0
    if g is None:
        probe_on = np.flatnonzero(cap > 0).tolist()
        if probe_on:
            scratch = what_if(scheduler, [state.name_of[int(rows[i])] for i in probe_on])
            for i in probe_on:
                cap[i] = len(sequential_fit(scratch, template, state.name_of[int(rows[i])], limit))
    return cap


# ---------------------------------------------------------------------------------- nodes


def choose_nodes(cap: Ints, cost: Floats, rank: Ints, target: int) -> list[tuple[int, int]]:
    """(index, members) for the fewest nodes holding ``min(target, sum(cap))`` members, with the
    lowest total ``cost`` among such sets (ties: lower ``rank``). Largest capacities first."""
    cap = np.minimum(cap, target)
    want = int(min(target, int(cap.sum())))
    if want <= 0:
        return []
    order = np.lexsort((rank, cost, -cap))
    k = int(np.searchsorted(np.cumsum(cap[order]), want)) + 1
    if k == 1:
        ok = np.flatnonzero(cap >= want)
        best = ok[np.lexsort((rank[ok], cost[ok]))[0]]
        return [(int(best), want)]
    # a node of capacity c can stand in only for a cheaper one of the same capacity: keep the k
    # cheapest per capacity, then a 0/1 knapsack over (nodes used, members held, clipped at want)
    items: list[int] = []
    for c in range(want, 0, -1):
        same = order[cap[order] == c]
        items.extend(same[:k].tolist())
    inf = np.inf
    best_cost = np.full((k + 1, want + 1), inf)
    best_cost[0, 0] = 0.0
    src = np.full((len(items), k + 1, want + 1), -1, np.int64)
    for it, i in enumerate(items):
        c, w = int(cap[i]), float(cost[i])
        new = best_cost.copy()
        cand = best_cost[:-1] + w  # from j nodes to j + 1
        if want - c > 0:
            vals = cand[:, : want - c]  # s -> s + c < want
            better = vals < new[1:, c:want]
            new[1:, c:want] = np.where(better, vals, new[1:, c:want])
            src[it, 1:, c:want] = np.where(better, np.arange(want - c), -1)
        lo = max(0, want - c)
        block = cand[:, lo:]  # s -> want (clipped)
        am = block.argmin(axis=1)
        mv = block[np.arange(k), am]
        better = mv < new[1:, want]
        new[1:, want] = np.where(better, mv, new[1:, want])
        src[it, 1:, want] = np.where(better, am + lo, -1)
        best_cost = new
    chosen: list[int] = []
    j, t = k, want
    for it in range(len(items) - 1, -1, -1):
        s = int(src[it, j, t])
        if s >= 0:
            chosen.append(items[it])
            t, j = s, j - 1
    chosen.sort(key=lambda i: (-int(cap[i]), float(cost[i]), int(rank[i])))
    out: list[tuple[int, int]] = []
    left = want
    for i in chosen:
        n = min(int(cap[i]), left)
        if n > 0:
            out.append((i, n))
            left -= n
    return out


# ---------------------------------------------------------------------------------- GPUs


def split_whole(state: ClusterState, row: int, n: int, g: int, *, topology: bool = True) -> list[list[int]]:
    """Columns of the GPUs of ``n`` members of ``g`` whole GPUs each on ``row``: the union by max
    bottleneck, then each member in turn takes the best subset of what is left."""
    free = np.flatnonzero(untouched_gpus(state, np.array([row], np.int64))[0]).tolist()
    need = n * g
    if len(free) < need:
        raise ValueError(f"node row {row} has {len(free)} free GPUs, {need} asked")
    t = state.tables[names.GPU]
    matrix = state.bandwidth.get(state.name_of[row]) if topology else None
    if matrix is None or matrix.shape[0] != t.count(row) or need < 2:
        union = free[:need]
        return [union[i * g : (i + 1) * g] for i in range(n)]
    solver = solver_for(matrix)
    best = solver.best(mask_of(free), need)
    if best is None:  # cannot happen: enough free GPUs were checked above
        raise ValueError("no GPU set found")
    left = list(best.gpus)
    out: list[list[int]] = []
    for _ in range(n):
        if g >= 2:
            part = solver.best(mask_of(left), g)
            cols = list(part.gpus) if part is not None else left[:g]
        else:
            cols = left[:1]
        out.append(sorted(cols))
        left = [c for c in left if c not in cols]
    return out


def whole_allocation(state: ClusterState, row: int, template: PodRequest, cols: list[int]) -> PodAllocation:
    """The allocation of one whole-GPU member taking GPU columns ``cols`` (containers in order)."""
    t = state.tables[names.GPU]
    it = iter(sorted(cols))
    containers = []
    for c in template.containers:
        grants: list[DeviceGrant] = []
        for d in c.devices:
            grants.extend(grant_for(t, row, next(it), d) for _ in range(d.count))
        containers.append(ContainerAllocation(name=c.name, devices=tuple(grants)))
    return PodAllocation(node=state.name_of[row], containers=tuple(containers))


# ---------------------------------------------------------------------------------- plan


def plan_layout(scheduler: Scheduler, template: PodRequest, count: int, rows: Ints) -> Layout:
    """Place ``count`` members like ``template`` over the nodes ``rows`` (module docstring)."""
    state = scheduler.state
    rows = np.asarray(rows, np.int64)
    if count <= 0 or len(rows) == 0:
        return Layout((), max(count, 0), 0.0)
    cap = capacities(scheduler, template, rows, count)
    g = whole_gpus(template)
    cost = sum_per_row(untouched_gpus(state, rows)).astype(np.float64) if g is not None else free_gpus(state, rows)
    picks = choose_nodes(cap, cost, state.rank[rows], count)
    allocs: list[PodAllocation] = []
    leftover = 0.0
    scratch = what_if(scheduler, [state.name_of[int(rows[i])] for i, _ in picks]) if g is None and picks else None
    for i, n in picks:
        row = int(rows[i])
        if g is not None:
            for cols in split_whole(state, row, n, g, topology=scheduler.settings.topology):
                allocs.append(whole_allocation(state, row, template, cols))
            leftover += float(cost[i]) - n * g
        else:
            assert scratch is not None
            got = sequential_fit(scratch, template, state.name_of[row], n)
            allocs.extend(got)
            used = sum(gr.core_milli for a in got for _, gr in a.grants() if gr.type == names.GPU)
            leftover += float(cost[i]) - used / 1000.0
    return Layout(tuple(allocs), count - len(allocs), leftover)


def gpu_minors(alloc: PodAllocation) -> list[int]:
    return sorted({g.minor for _, g in alloc.grants() if g.type == names.GPU})
