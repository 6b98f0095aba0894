"""GPUs: compute share + memory (bytes or ratio), node labels, GPU models, and topology."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from devshare.engine.handlers.base import Code, Context, Ints
from devshare.engine.handlers.share import Reasons, ShareHandler
from devshare.engine.policy import Choice, FitView
from devshare.engine.topology import TopologySolver
from devshare.model import names


class GpuHandler(ShareHandler):
    def __init__(self) -> None:
        super().__init__(names.GPU)
        self._solvers: dict[bytes, TopologySolver] = {}
        self._node_solver: dict[str, tuple[Any, TopologySolver, float]] = {}

    def node_model(self, ctx: Context, row: int) -> str:
        info = ctx.state.nodes.get(ctx.state.name_of.get(row, ""))
        if info is not None and info.gpu_model:
            return info.gpu_model
        t = ctx.state.tables.get(self.type)
        models = [m for m in (t.models[row] if t is not None else []) if m]
        return models[0] if models else ""

    def constraints(self, ctx: Context, rows: Ints) -> tuple[npt.NDArray[np.int8], Reasons]:
        pod, state = ctx.pod, ctx.state
        codes = np.zeros(len(rows), np.int8)
        why: dict[int, str] = {}
        multi = pod.multi_card_share()
        if not (pod.gpu_models or pod.compute_policy or multi):
            return codes, lambda i: ""
        for i, row in enumerate(rows.tolist()):
            info = state.nodes.get(state.name_of.get(row, ""))
            if pod.gpu_models:
                model = self.node_model(ctx, row)
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
            codes[i] = Code.UNRESOLVABLE
        return codes, lambda i: why.get(i, "")

    def choose(self, ctx: Context, view: FitView) -> Choice:
        choice: Choice = ctx.policy.choose(view)
        return choice

    def solver(self, node: str, matrix: Any) -> tuple[TopologySolver, float]:
        """The memoizing solver for a node's matrix (shared by nodes with equal matrices), and the
        matrix's best link (to normalise bottlenecks)."""
        hit = self._node_solver.get(node)
        if hit is not None and hit[0] is matrix:
            return hit[1], hit[2]
        m = np.asarray(matrix, np.float64)
        key = np.ascontiguousarray(m).tobytes()
        s = self._solvers.get(key)
        if s is None:
            s = self._solvers[key] = TopologySolver(m)
        off = m[~np.eye(m.shape[0], dtype=bool)]
        top = float(off.max()) if off.size else 0.0
        self._node_solver[node] = (matrix, s, top)
        return s, top

    def refine(self, ctx: Context, view: FitView, choice: Choice) -> Choice:
        """Whole multi-GPU asks on nodes with a bandwidth matrix take the set with the largest
        bottleneck bandwidth (ties: total bandwidth), and the node score rewards a good set."""
        req = view.request
        if req is None or not ctx.settings.topology or req.count < 2 or not req.whole:
            return choice
        state = ctx.state
        if not state.bandwidth:
            return choice
        cols = choice.columns.copy()
        topo = np.full(len(view.rows), 0.5)
        weights = 1 << np.arange(view.fits.shape[1], dtype=np.int64)
        masks = (view.fits.astype(np.int64) * weights).sum(axis=1)
        for i, row in enumerate(view.rows.tolist()):
            name = state.name_of.get(row, "")
            matrix = state.bandwidth.get(name)
            if matrix is None:
                continue
            solver, top = self.solver(name, matrix)
            res = solver.best(int(masks[i]), req.count)
            if res is None:
                continue
            cols[i] = np.asarray(res.gpus, np.int64)
            topo[i] = res.bottleneck / top if top > 0 else 0.0
        return Choice(0.5 * choice.scores + 0.5 * topo, cols)
