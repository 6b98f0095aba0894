"""GPUs: compute share + memory (bytes or ratio), node labels, GPU models, and topology."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from devshare.engine import selection
from devshare.engine.fit import FitView, sum_per_row
from devshare.engine.handlers.base import UNRESOLVABLE, Context, Ints
from devshare.engine.handlers.share import Reasons, ShareHandler
from devshare.engine.policies.base import Choice, Policy
from devshare.engine.policies.binpack import binpack_for
from devshare.engine.state import ClusterState
from devshare.engine.table import DeviceTable
from devshare.engine.topology import TopologySolver, solver_for
from devshare.model import names
from devshare.model.dialects import dialect_of
from devshare.model.request import DeviceRequest


class GpuHandler(ShareHandler):
    def __init__(self) -> None:
        super().__init__(names.GPU)

    def rules(self, ctx: Context, table: DeviceTable, rows: Ints) -> tuple[npt.NDArray[np.int8], Reasons,
                                                                        npt.NDArray[np.bool_] | None]:
        """The pod's GPU selection (the cards it may take), GPU models, compute policy and seed 000's
        rule for a share spread over several GPUs, on ``rows``."""
        sel = ctx.pod.gpu_selection
        allowed = None if sel is None else selection.allowed(ctx.state, table, sel)
        codes, reason = self._constraints(ctx, table, rows, allowed)
        return codes, reason, allowed

    def _constraints(self, ctx: Context, table: DeviceTable, rows: Ints,
                     allowed: npt.NDArray[np.bool_] | None) -> tuple[npt.NDArray[np.int8], Reasons]:
        pod, state = ctx.pod, ctx.state
        codes = np.zeros(len(rows), np.int8)
        why: dict[int, str] = {}
        # seed 000's rule for one container over several shared cards (a node label and
        # native-burst-share); the dialect says whether it applies (Aliyun's gpu-mem over gpu-count does not)
        multi = pod.multi_card_share()
        if multi:
            dialect = dialect_of(pod.dialect)
            multi = dialect is None or dialect.multi_card_share_needs_label
        if pod.gpu_selection is not None and allowed is not None:
            self._selected(ctx, table, rows, allowed, why)
        if not (pod.gpu_models or pod.compute_policy or multi):
            for i in why:
                codes[i] = UNRESOLVABLE
            return codes, lambda i: why.get(i, "")
        for i, row in enumerate(rows.tolist()):
            if i in why:
                continue
            info = state.nodes.get(state.name_of.get(row, ""))
            if pod.gpu_models:
                model = ctx.state.gpu_model(row)
                if model not in pod.gpu_models:
                    why[i] = (f"GPU model {model or 'unknown'} is not one of {', '.join(pod.gpu_models)}"
                              + ("" if model else f" (label the node {names.NODE_GPU_MODEL})"))
                    continue
            node_policy = info.compute_policy if info is not None else None
            if pod.compute_policy and node_policy != pod.compute_policy:
                why[i] = (f"pod asks compute policy {pod.compute_policy}, node has "
                          f"{node_policy or 'none'} (label {names.COMPUTE_POLICY})")
                continue
            if multi:
                if info is None or not info.multi_gpu_share:
                    why[i] = (f"a container shares several GPUs, which this node does not allow "
                              f"(label {names.MULTI_GPU_SHARE}=true enables it)")
                    continue
                if node_policy != names.MULTI_SHARE_POLICY:
                    why[i] = (f"a container shares several GPUs, which needs compute policy "
                              f"{names.MULTI_SHARE_POLICY}; node has {node_policy or 'none'}")
                    continue
        for i in why:
            codes[i] = UNRESOLVABLE
        return codes, lambda i: why.get(i, "")

    def _selected(self, ctx: Context, table: DeviceTable, rows: Ints, allowed: npt.NDArray[np.bool_],
                  why: dict[int, str]) -> None:
        """Nodes where the pod's GPU selection (``allowed``) leaves fewer GPUs than a container asks for:
        no freed capacity changes that (UNRESOLVABLE), and the reason names the GPUs left out."""
        state, pod = ctx.state, ctx.pod
        sel = pod.gpu_selection
        if sel is None:
            return
        biggest = max((d.count for c in pod.containers for d in c.devices if d.type == self.type), default=0)
        present = state.caches.per_layout((self.type, "devices"), lambda: sum_per_row(table.present))
        n_allowed = sum_per_row(allowed & table.present)[rows]
        for i in np.flatnonzero(n_allowed < biggest).tolist():
            row = int(rows[i])
            out = selection.why_excluded(state, table, row, sel)
            shown = "; ".join(out[:3]) + ("; ..." if len(out) > 3 else "")
            why[i] = (f"the pod's GPU selection ({sel.describe()}) allows {int(n_allowed[i])} of this node's "
                      f"{int(present[row])} GPU(s), a container asks for {biggest}" + (f": {shown}" if shown else ""))

    def policy_for(self, ctx: Context, req: DeviceRequest) -> Policy:
        if req.core_milli == 0:
            # memory only (Aliyun gpu-mem): no compute share to defragment; seed 002's bind rule,
            # the fitting card with the least free memory, is card-level binpack
            return binpack_for(ctx.settings, core_weight=ctx.settings.core_weight)
        policy: Policy = ctx.policy
        return policy

    def row_solvers(self, state: ClusterState) -> tuple[npt.NDArray[np.int64], list[tuple[TopologySolver, float]]]:
        """Per node row, the index of its bandwidth matrix's solver (-1: none), and the solvers with
        their best link (to normalise bottlenecks). Rebuilt only when nodes or devices change."""
        return state.caches.per_layout("gpu topology solvers", lambda: _row_solvers(state))

    def refine(self, ctx: Context, view: FitView, choice: Choice) -> Choice:
        """Whole multi-GPU asks on nodes with a bandwidth matrix take the set with the largest
        bottleneck bandwidth (ties: total bandwidth), and the node score rewards a good set.
        Nodes sharing a matrix and a free-GPU mask are solved once (memoized per solver)."""
        req = view.request
        if req is None or not ctx.settings.topology or req.count < 2 or not req.whole:
            return choice
        state = ctx.state
        if not state.bandwidth:
            return choice
        row_solver, solvers = self.row_solvers(state)
        sid = row_solver[view.rows]
        has = sid >= 0
        if not has.any():
            return choice
        cols = choice.columns.copy()
        topo = np.full(len(view.rows), 0.5)
        width = view.fits.shape[1]
        weights = 1 << np.arange(width, dtype=np.int64)
        masks = (view.fits.astype(np.int64) * weights).sum(axis=1)
        keys = sid[has] * (1 << width) + masks[has]
        uniq, inverse = np.unique(keys, return_inverse=True)
        u_cols = np.zeros((len(uniq), req.count), np.int64)
        u_topo = np.full(len(uniq), 0.5)
        u_ok = np.zeros(len(uniq), np.bool_)
        for u, key in enumerate(uniq.tolist()):
            solver, top = solvers[key >> width]
            res = solver.best(key & ((1 << width) - 1), req.count)
            if res is None:
                continue
            u_ok[u] = True
            u_cols[u] = res.gpus
            u_topo[u] = res.bottleneck / top if top > 0 else 0.0
        where = np.flatnonzero(has)
        good = u_ok[inverse]
        cols[where[good]] = u_cols[inverse[good]]
        topo[where[good]] = u_topo[inverse[good]]
        return Choice(0.5 * choice.scores + 0.5 * topo, cols)


def _row_solvers(state: ClusterState) -> tuple[npt.NDArray[np.int64], list[tuple[TopologySolver, float]]]:
    idx = np.full(max(state.n_rows, 1), -1, np.int64)
    solvers: list[tuple[TopologySolver, float]] = []
    seen: dict[int, int] = {}
    for name, matrix in state.bandwidth.items():
        s = solver_for(matrix)
        k = seen.get(id(s))
        if k is None:
            m = np.asarray(matrix, np.float64)
            off = m[~np.eye(m.shape[0], dtype=bool)]
            k = seen[id(s)] = len(solvers)
            solvers.append((s, float(off.max()) if off.size else 0.0))
        idx[state.row_of[name]] = k
    return idx, solvers
