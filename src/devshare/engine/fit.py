"""Per-node fit: which devices, and how much of each, for every container of a pod.

Two paths, same answer:

- :func:`card_fits` — vectorized over many nodes at once, for the common shape where one container
  asks for ``k`` devices of a type: a boolean ``[nodes, devices]`` mask of the devices that can take
  one share; the node fits when at least ``k`` are true.
- :func:`search` — seed 000's depth-first search over containers with pruning, for pods where
  several containers ask for the same device type (``"2,1,3"``). Each level of the tree is a
  container, each branch a set of devices for it; a branch whose admission fails is cut; identical
  device states are tried once per level; a bound on the best reachable score cuts branches that
  cannot win. It returns the best-scoring combination, not the first feasible one.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from devshare.engine.table import DeviceTable
from devshare.model.request import WHOLE, DeviceRequest

Mask = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]


def memory_need(req: DeviceRequest, total_mem: Ints) -> Ints:
    """Bytes ``req`` needs on each device (ratio requests depend on each device's total)."""
    if req.memory_ratio_milli:
        return total_mem * req.memory_ratio_milli // WHOLE
    return np.full(total_mem.shape, req.memory, np.int64)


def card_fits(table: DeviceTable, rows: Ints, req: DeviceRequest, max_containers: int) -> Mask:
    """``[len(rows), width]``: can each device of each row take one share of ``req``?"""
    usable = table.usable()[rows]
    free_core = table.total_core[rows] - table.used_core[rows]
    free_mem = table.total_mem[rows] - table.used_mem[rows]
    need_mem = memory_need(req, table.total_mem[rows])
    ok = usable & (free_core >= req.core_milli) & (free_mem >= need_mem)
    ok &= table.used_slots[rows] < max_containers
    if req.whole:
        # a whole device is exclusive: nothing else may be on it
        ok &= (table.used_core[rows] == 0) & (table.used_mem[rows] == 0) & (table.used_slots[rows] == 0)
    return ok


def card_scores(
    table: DeviceTable, rows: Ints, req: DeviceRequest, core_weight: float, binpack: bool
) -> npt.NDArray[np.float64]:
    """Seed 000's card score after placing one share of ``req`` on each device:
    ``w * core-score + (1 - w) * memory-score``; binpack scores fuller devices higher, spread emptier."""
    total_core = np.maximum(table.total_core[rows], 1)
    total_mem = np.maximum(table.total_mem[rows], 1)
    core_after = (table.used_core[rows] + req.core_milli) / total_core
    mem_after = (table.used_mem[rows] + memory_need(req, table.total_mem[rows])) / total_mem
    util = core_weight * core_after + (1.0 - core_weight) * mem_after
    return np.asarray(util if binpack else 1.0 - util, dtype=np.float64)


def pick_columns(fits: Mask, scores: npt.NDArray[np.float64], k: int) -> Ints:
    """For each row, the ``k`` fitting columns with the best scores (ties: lowest column)."""
    masked = np.where(fits, scores, -np.inf)
    order = np.argsort(-masked, axis=1, kind="stable")
    return np.asarray(order[:, :k], dtype=np.int64)


# ---------------------------------------------------------------------------- DFS (seed 000)


class Need(NamedTuple):
    """One container's ask of one device type on one node, resolved to bytes per device."""

    container: int
    n: int  # devices asked
    core: int
    memory: Ints  # bytes needed on each device (ratio requests differ per device)
    whole: bool


class SearchResult(NamedTuple):
    columns: dict[int, tuple[int, ...]]  # container index -> device columns
    score: float
    exhaustive: bool  # False when the node budget stopped the search early
    nodes: int


def search(
    free_core: Sequence[int] | Ints,
    free_mem: Sequence[int] | Ints,
    free_slots: Sequence[int] | Ints,
    total_core: Sequence[int] | Ints,
    total_mem: Sequence[int] | Ints,
    usable: Sequence[bool] | Mask,
    untouched: Sequence[bool] | Mask,
    needs: Sequence[Need],
    *,
    core_weight: float,
    binpack: bool,
    budget: int = 20000,
) -> SearchResult | None:
    """Best combination of devices for all ``needs`` on one node, or None if none fits.

    The score of a combination is the mean, over every (container, device) grant, of the device's
    seed-000 card score once the whole combination is placed (binpack: fuller is better)."""
    fc = [int(x) for x in free_core]
    fm = [int(x) for x in free_mem]
    fs = [int(x) for x in free_slots]
    tc = [max(int(x), 1) for x in total_core]
    tm = [max(int(x), 1) for x in total_mem]
    ok = [bool(x) for x in usable]
    fresh = [bool(x) for x in untouched]  # nothing on the device: a whole-device ask may take it
    n = len(fc)
    used_c = [tc[j] - fc[j] for j in range(n)]
    used_m = [tm[j] - fm[j] for j in range(n)]
    order = sorted(range(len(needs)), key=lambda i: (-needs[i].n, -needs[i].core, -int(needs[i].memory.max(initial=0))))
    grants_total = sum(nd.n for nd in needs)
    if grants_total == 0:
        return SearchResult({}, 0.0, True, 0)
    taken = [0] * n  # grants placed on each device along the current path
    whole_taken = [0] * n  # whole-device grants on each device along the current path
    best: list[Any] = [None, -1.0]
    stats = {"nodes": 0, "cut": False}
    chosen: dict[int, tuple[int, ...]] = {}

    def final_score() -> float:
        total = 0.0
        for cols in chosen.values():
            for j in cols:
                util = core_weight * (used_c[j] / tc[j]) + (1.0 - core_weight) * (used_m[j] / tm[j])
                total += util if binpack else 1.0 - util
        return total / grants_total

    def dfs(level: int) -> None:
        if stats["nodes"] >= budget:
            stats["cut"] = True
            return
        stats["nodes"] += 1
        if level == len(order):
            s = final_score()
            if s > best[1] + 1e-12:
                best[0] = dict(chosen)
                best[1] = s
            return
        nd = needs[order[level]]
        mem = [int(x) for x in nd.memory]
        cands = [
            j for j in range(n)
            if ok[j] and whole_taken[j] == 0 and fc[j] >= nd.core and fm[j] >= mem[j] and fs[j] >= 1
            and (not nd.whole or (fresh[j] and taken[j] == 0))
        ]
        if len(cands) < nd.n:
            return

        def card_util(j: int) -> float:
            return core_weight * (used_c[j] + nd.core) / tc[j] + (1.0 - core_weight) * (used_m[j] + mem[j]) / tm[j]

        # try the most promising devices first, so a good combination is found early
        cands.sort(key=lambda j: (-card_util(j) if binpack else card_util(j), j))
        seen: set[tuple[tuple[int, int, int, int, int, int], ...]] = set()
        for combo in combinations(cands, nd.n):
            sig = tuple(sorted((fc[j], fm[j], fs[j], tc[j], tm[j], mem[j]) for j in combo))
            if sig in seen:
                continue  # an identical set of device states was already explored at this level
            seen.add(sig)
            for j in combo:
                fc[j] -= nd.core
                fm[j] -= mem[j]
                fs[j] -= 1
                used_c[j] += nd.core
                used_m[j] += mem[j]
                taken[j] += 1
                whole_taken[j] += int(nd.whole)
            chosen[nd.container] = combo
            dfs(level + 1)
            del chosen[nd.container]
            for j in combo:
                fc[j] += nd.core
                fm[j] += mem[j]
                fs[j] += 1
                used_c[j] -= nd.core
                used_m[j] -= mem[j]
                taken[j] -= 1
                whole_taken[j] -= int(nd.whole)
            if stats["cut"]:
                return
            if binpack and best[1] >= 1.0 - 1e-12:
                return  # nothing can beat a perfect pack

    dfs(0)
    if best[0] is None:
        return None
    return SearchResult(best[0], float(best[1]), not stats["cut"], int(stats["nodes"]))
