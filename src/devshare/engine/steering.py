"""Steering the pods devshare does not place away from the GPUs it needs (issue 41).

kube-scheduler's default profile places most pods of a cluster (those asking for no GPU) by
LeastAllocated and BalancedAllocation: on the nodes with the most CPU and memory free, which are the
nodes whose GPUs are free. Their CPU is then gone when a pod asking those GPUs arrives: on openb, an
8-GPU pod asks 88 of a node's 96 cores, and with CPU-only pods spread over every node the first ones
fit nowhere at 10% of the workload arrived, 4.3-4.9% of the GPUs left unallocated at 100% against
3.8-3.9% when devshare places every pod.

devshare marks each node that holds a whole GPU nobody uses with a ``PreferNoSchedule`` taint
(:data:`TAINT_KEY`). It forbids nothing: kube-scheduler's TaintToleration plugin (weight 3 in the
default profile, against 1 for LeastAllocated) only scores such nodes lower for pods that do not
tolerate it, so those pods go to nodes whose GPUs are taken while there are any, as devshare's own
policy places a CPU-only pod (``cpuPack``). Modelled on openb (kube-scheduler's scores and window,
:mod:`devshare.sim.online`): 3.87 and 3.84% unallocated on seeds 42 and 43, where the simulator gives
3.87 and 3.82.

This module only says which nodes should carry the taint; the extender's leader writes it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from devshare.engine.state import ClusterState
from devshare.model import names

TAINT_KEY = "devshare.io/whole-gpu-free"
TAINT_EFFECT = "PreferNoSchedule"

Mask = np.ndarray[Any, np.dtype[np.bool_]]


def whole_gpu_free(state: ClusterState, rows: np.ndarray[Any, np.dtype[np.int64]]) -> Mask:
    """Per row: the node has a GPU that may take work and that nothing uses (no share, no container)."""
    t = state.tables.get(names.GPU)
    if t is None or rows.size == 0:
        return np.zeros(rows.shape[0], np.bool_)
    idle = t.usable_mask[rows] & (t.used_slots[rows] == 0) & (t.used_core[rows] == 0) & (t.used_mem[rows] == 0)
    out: Mask = idle.any(axis=1)
    return out


def steered_nodes(state: ClusterState) -> set[str]:
    """The nodes that should carry the taint now."""
    rows = state.node_rows()
    marked = rows[whole_gpu_free(state, rows)]
    return {state.name_of[int(r)] for r in marked.tolist()}
