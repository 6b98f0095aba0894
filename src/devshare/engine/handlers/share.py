"""The shared-device algorithm every handler runs: vectorized for one asking container, seed 000's
DFS for several, with per-node reasons a person can act on ("gpu 3: 2 GiB free, 6 GiB asked")."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from functools import partial

import numpy as np
import numpy.typing as npt

from devshare.engine.admit import Ask, Card, Reason, card_reasons, describe
from devshare.engine.caches import LRU, policy_key
from devshare.engine.fit import FitView, Gather, card_fits, fitting, greedy, memory_need, sum_per_row
from devshare.engine.handlers.base import (
    SUCCESS,
    UNRESOLVABLE,
    UNSCHEDULABLE,
    Context,
    DeviceHandler,
    Evaluation,
    Grants,
    Ints,
    grant_for,
)
from devshare.engine.policies.base import Choice, Policy, node_utilization
from devshare.engine.search import Need, SearchResult, search
from devshare.engine.state import ClusterState
from devshare.engine.table import DeviceTable
from devshare.model.quantity import human_bytes
from devshare.model.request import DeviceRequest

Reasons = Callable[[int], str]
Mask = npt.NDArray[np.bool_]


def _pct(milli: int) -> str:
    return f"{milli / 10:g}%"


def describe_ask(device_type: str, req: DeviceRequest) -> str:
    if req.whole:
        return f"{req.count} whole {device_type}" if req.count > 1 else f"a whole {device_type}"
    parts = []
    if req.core_milli:
        parts.append(f"{_pct(req.core_milli)} compute")
    if req.memory_ratio_milli:
        parts.append(f"{_pct(req.memory_ratio_milli)} of memory")
    elif req.memory:
        parts.append(human_bytes(req.memory))
    what = " and ".join(parts) or "a share"
    return f"{req.count} {device_type} with {what} each" if req.count > 1 else f"one {device_type} with {what}"


def describe_cards(table: DeviceTable, row: int, req: DeviceRequest, max_containers: int,
                   allowed: Mask | None = None) -> str:
    """Why each device of ``row`` cannot take one share of ``req`` (devices that can are skipped);
    ``allowed``: the cards the pod's GPU selection lets it take (all when None).

    Full nodes tend to look alike, so the text is cached on the row's device state."""
    n = table.count(row)
    state = (
        table.minor[row, :n].tolist(), table.healthy[row, :n].tolist(), table.blocked[row, :n].tolist(),
        table.total_core[row, :n].tolist(), table.total_mem[row, :n].tolist(),
        table.free_core[row, :n].tolist(), table.free_mem[row, :n].tolist(), table.used_slots[row, :n].tolist(),
        [False] * n if allowed is None else (~allowed[row, :n]).tolist(),
    )
    key = (table.type, req, max_containers, tuple(tuple(x) for x in state))
    hit: str | None = _REASONS.get(key)
    if hit is None:
        hit = _REASONS.put(key, _describe(table.type, req, max_containers, *state))
    return hit


_REASONS: LRU[object, str] = LRU(4096)  # keyed by the cards' whole state: never stale, only bounded
REFRESH_AT_ONCE = 256  # changed nodes scored beside a pod's own candidates in one policy call (_choose)
PERMANENT = (": unhealthy", ": held by another device plugin", "compute in all, too small",
             ": left out by the pod's GPU selection")


def stale_elsewhere(state: ClusterState, e_version: Ints, scoring: Ints) -> Ints:
    """Rows whose kept answers (``e_version``: the row version each was kept at, -1 for none) are
    stale, other than ``scoring``: at most :data:`REFRESH_AT_ONCE` of them."""
    n = state.n_rows
    stale = (e_version[:n] >= 0) & (e_version[:n] != state.row_version[:n])
    stale[scoring] = False
    return np.flatnonzero(stale)[:REFRESH_AT_ONCE]


def _describe(dtype: str, req: DeviceRequest, max_containers: int, minors: list[int], healthy: list[bool],
              blocked: list[bool], total_core: list[int], total_mem: list[int], free_core: list[int],
              free_mem: list[int], slots: list[int], excluded: list[bool]) -> str:
    """The messages of :func:`devshare.engine.admit.card_reasons` for one share of ``req`` on each card."""
    need = [req.memory_on(t) for t in total_mem]
    codes = card_reasons(Card(True, np.asarray(healthy), np.asarray(blocked), np.asarray(total_core),
                              np.asarray(total_mem), np.asarray(free_core), np.asarray(free_mem), np.asarray(slots),
                              np.asarray(excluded)),
                         Ask(req.core_milli, np.asarray(need, np.int64), req.whole, 1, max_containers)).tolist()
    out = [describe(code, f"{dtype} {minor}", total_core=total_core[j], total_mem=total_mem[j],
                    free_core=free_core[j], free_mem=free_mem[j], slots=slots[j], core=req.core_milli,
                    memory=need[j], max_containers=max_containers)
           for j, (minor, code) in enumerate(zip(minors, codes, strict=True)) if code != Reason.FITS]
    return "; ".join(out) if out else "no usable device"


def large_enough(table: DeviceTable, req: DeviceRequest, allowed: Mask | None = None) -> Ints:
    """Per row, how many usable devices (that the pod may take: ``allowed``) are large enough in all
    for one share of ``req``."""
    big = table.usable() & (table.total_core >= req.core_milli)
    if allowed is not None:
        big &= allowed
    if req.memory or req.memory_ratio_milli:
        big &= table.total_mem >= memory_need(req, table.total_mem)
    return sum_per_row(big)


class ShareHandler(DeviceHandler):
    """Fractional and whole shares of devices with a compute (share) and a memory dimension."""

    def __init__(self, device_type: str) -> None:
        self.type = device_type

    # hooks ---------------------------------------------------------------------------------
    def rules(self, ctx: Context, table: DeviceTable, rows: Ints) -> tuple[npt.NDArray[np.int8], Reasons, Mask | None]:
        """The pod's own rules on ``rows``: the node-level ones no amount of freed capacity can change
        (UNRESOLVABLE codes, and their reasons), and ``[table rows, width]`` the devices it may take
        (its selection; None: all)."""
        return np.zeros(len(rows), np.int8), lambda i: "", None

    def policy_for(self, ctx: Context, req: DeviceRequest) -> Policy:
        """The policy that scores nodes and picks devices for ``req``."""
        raise NotImplementedError

    def refine(self, ctx: Context, view: FitView, choice: Choice) -> Choice:
        """Adjust the chosen devices (e.g. by topology) after the policy's choice."""
        return choice

    def answer_key(self, ctx: Context) -> Hashable | None:
        """One container asking for this type, and a policy whose answer on a node may be kept (its
        declared key, as :meth:`_choose` keeps it): the policy and that key."""
        needs = ctx.pod.needs(self.type)
        if len(needs) != 1:
            return None
        req = needs[0][1]
        policy = self.policy_for(ctx, req)
        declared = policy_key(policy, ctx.pod, req)
        return None if declared is None else (self.type, declared)

    def grants_of(self, ctx: Context, rows: Ints, columns: Ints) -> Callable[[int], Grants]:
        ((ci, req),) = ctx.pod.needs(self.type)
        state = ctx.state

        def grant(i: int) -> Grants:  # a passing row: the type's table exists then
            row, table = int(rows[i]), state.tables[self.type]
            return {ci: tuple(grant_for(table, row, int(c), req) for c in columns[i])}

        return grant

    # the algorithm -------------------------------------------------------------------------
    def evaluate(self, ctx: Context, rows: Ints) -> Evaluation:
        state, pod = ctx.state, ctx.pod
        needs = pod.needs(self.type)
        m = len(rows)
        codes = np.zeros(m, np.int8)
        scores = np.zeros(m, np.float64)
        table = state.tables.get(self.type)
        if table is None or not needs:
            none_reason = f"node has no {self.type} devices (no Device object lists any)"
            codes[:] = UNRESOLVABLE if needs else SUCCESS
            # no device columns chosen, but they are said when the answer may be kept (answer_key)
            cols = np.zeros((m, needs[0][1].count), np.int64) if len(needs) == 1 else None
            return Evaluation(rows, codes, scores, lambda i: none_reason, lambda i: {}, columns=cols)
        c_codes, c_reason, allowed = self.rules(ctx, table, rows)
        codes = c_codes.copy()
        ctx.cache[f"{self.type} allowed"] = allowed
        reasons = self._never_fits(ctx, table, rows, needs, codes)
        if len(needs) == 1:
            return self._one_container(ctx, table, rows, needs[0], allowed, codes, reasons, c_reason)
        return self._several_containers(ctx, table, rows, needs, Gather(table, rows, allowed), codes, reasons,
                                        c_reason)

    def _never_fits(self, ctx: Context, table: DeviceTable, rows: Ints, needs: list[tuple[int, DeviceRequest]],
                    codes: npt.NDArray[np.int8]) -> dict[int, str]:
        """Mark UNRESOLVABLE (in ``codes``) the rows no amount of freed capacity can satisfy: too few
        devices, or too few big enough (preemption would not help). Returns their reasons."""
        state = ctx.state
        n_dev = state.caches.per_layout((self.type, "devices"), lambda: sum_per_row(table.present))[rows]
        reasons: dict[int, str] = {}
        biggest = max(r.count for _, r in needs)
        too_few = (codes == SUCCESS) & (n_dev < biggest)
        codes[too_few] = UNRESOLVABLE
        for i in np.flatnonzero(too_few).tolist():
            reasons[i] = (f"node has {int(n_dev[i])} {self.type} device(s), a container asks for {biggest}"
                          if n_dev[i] else f"node has no {self.type} devices")
        allowed = ctx.cache.get(f"{self.type} allowed")
        sel = ctx.pod.gpu_selection if allowed is not None else None
        for _, req in needs:
            n_big = state.caches.per_layout((self.type, "large enough", req, sel),
                                     partial(large_enough, table, req, allowed))[rows]
            never = (codes == SUCCESS) & (n_big < req.count)
            codes[never] = UNRESOLVABLE
            for i in np.flatnonzero(never).tolist():
                # only what no freed capacity changes: the cards that are unhealthy, held or too small
                cards = describe_cards(table, int(rows[i]), req, state.max_containers, allowed).split("; ")
                lasting = [c for c in cards if c.endswith(PERMANENT)]
                # "needs <ask>; ..." : the extender keeps the part before "; " for kube-scheduler's event
                reasons[i] = (f"needs {describe_ask(self.type, req)}; only {int(n_big[i])} of its "
                              f"{int(n_dev[i])} {self.type} device(s) are healthy and that large"
                              + (f" ({'; '.join(lasting)})" if lasting else ""))
        return reasons

    def _one_container(self, ctx: Context, table: DeviceTable, rows: Ints, need: tuple[int, DeviceRequest],
                       allowed: Mask | None, codes: npt.NDArray[np.int8], reasons: dict[int, str],
                       c_reason: Reasons) -> Evaluation:
        """One container asks for this type: every node at once (the card mask, the policy)."""
        mc = ctx.state.max_containers
        m = len(rows)
        scores = np.zeros(m, np.float64)
        req = need[1]
        g, fits, enough = fitting(table, rows, allowed, req, mc)
        short = (codes == SUCCESS) & ~enough
        codes[short] = UNSCHEDULABLE
        ok = np.flatnonzero(codes == SUCCESS)
        cols = np.zeros((m, req.count), np.int64)
        if ok.size:
            self._choose(ctx, table, rows, ok, fits, g, req, scores, cols)

        def explain(i: int) -> str:
            if i in reasons:
                return reasons[i]
            if codes[i] == UNRESOLVABLE:
                return c_reason(i)
            allowed = ctx.cache.get(f"{self.type} allowed")
            return f"needs {describe_ask(self.type, req)}; {describe_cards(table, int(rows[i]), req, mc, allowed)}"

        return Evaluation(rows, codes, scores, explain, self.grants_of(ctx, rows, cols), columns=cols)

    def _several_containers(self, ctx: Context, table: DeviceTable, rows: Ints,
                            needs: list[tuple[int, DeviceRequest]], g: Gather, codes: npt.NDArray[np.int8],
                            reasons: dict[int, str], c_reason: Reasons) -> Evaluation:
        """Several containers ask for this type: greedy where it decides, seed 000's DFS elsewhere."""
        state, pod = ctx.state, ctx.pod
        mc = state.max_containers
        m = len(rows)
        scores = np.zeros(m, np.float64)
        # several containers ask for this type. A vectorized greedy placement decides most nodes;
        # seed 000's exact DFS runs where it cannot (greedy failed) and, for the devices, on the node
        # finally chosen (grant_multi), so the allocation is the best-scoring combination there.
        live = np.flatnonzero(codes == SUCCESS)
        results: dict[int, SearchResult] = {}
        if live.size:
            sub = g.subset(live) if live.size != m else g
            ok_g, score_g = greedy(sub, needs, mc, ctx.settings.core_weight, ctx.settings.card_binpack)
            scores[live] = score_g
            # where greedy failed, a node that cannot pass the necessary tests (each container finds
            # enough devices on its own; the free compute covers the sum) fails without a search
            possible = ~ok_g
            if possible.any():
                total_core = sum(r.core_milli * r.count for _, r in needs)
                possible &= sum_per_row(np.where(sub.usable, np.maximum(sub.free_core, 0), 0)) >= total_core
                for _, r in needs:
                    possible &= sum_per_row(card_fits(sub, r, mc)) >= r.count
                for k in np.flatnonzero(~ok_g & ~possible).tolist():
                    codes[int(live[k])] = UNSCHEDULABLE
            for k in np.flatnonzero(possible).tolist():
                i = int(live[k])
                res = self._search(ctx, table, int(rows[i]), needs, first=True)
                if res is None:
                    codes[i] = UNSCHEDULABLE
                else:
                    scores[i] = res.score
            fit_idx = np.flatnonzero(codes == SUCCESS)
            if fit_idx.size:
                extra = sum(r.core_milli * r.count for _, r in needs)
                util = node_utilization(g.subset(fit_idx), float(extra))
                node = util if ctx.settings.node_binpack else 1.0 - util
                scores[fit_idx] = 0.5 * scores[fit_idx] + 0.5 * node

        def explain_multi(i: int) -> str:
            if i in reasons:
                return reasons[i]
            if codes[i] == UNRESOLVABLE:
                return c_reason(i)
            asks = ", ".join(f"{pod.containers[c].name}: {describe_ask(self.type, r)}" for c, r in needs)
            return f"no combination of {self.type} devices fits every container ({asks})"

        def grant_multi(i: int) -> Grants:
            row = int(rows[i])
            res = results.get(i) or self._search(ctx, table, row, needs)
            if res is None:
                raise RuntimeError(f"node {state.name_of.get(row)} passed the filter but no combination fits")
            results[i] = res
            by_container = dict(needs)
            return {c: tuple(grant_for(table, row, j, by_container[c]) for j in sorted(cols_))
                    for c, cols_ in res.columns.items()}

        return Evaluation(rows, codes, scores, explain_multi, grant_multi)

    def _choose(self, ctx: Context, table: DeviceTable, rows: Ints, ok: Ints, fits: npt.NDArray[np.bool_],
                g: Gather, req: DeviceRequest, scores: npt.NDArray[np.float64], cols: Ints) -> None:
        """Scores and devices of the fitting rows ``rows[ok]``, written into ``scores``/``cols``.

        With a row-local policy, a node's answer is kept until that node changes (its row version),
        the policy's model changes, or nodes come and go: between two binds only one node changes,
        so the next pod of the same shape is scored on that node alone. When one must be scored, the
        other nodes this shape was scored on before and that changed since are scored in the same
        call (:func:`stale_elsewhere`): kube-scheduler sends a different window of candidates with
        each pod, so the node the last pod took is rarely among the next pod's, and without this
        nearly every pod would pay a policy call for the one changed node of its own window."""
        state, pod = ctx.state, ctx.pod
        policy = self.policy_for(ctx, req)
        m = len(rows)

        def compute(idx: Ints, stale: Ints | None = None) -> tuple[Ints, Choice]:
            """The policy's choice on ``rows[idx]`` and, when given, on the ``stale`` rows elsewhere
            that a share still fits (the others stay stale); returns the rows chosen on too."""
            if stale is not None and stale.size:
                both = np.concatenate([rows[idx], stale])
                g2, f2, enough = fitting(table, both, ctx.cache.get(f"{self.type} allowed"), req, state.max_containers)
                keep = np.flatnonzero((np.arange(both.size) < idx.size) | enough)
                view = FitView(state, pod, both[keep], table, req, f2[keep], g2.subset(keep))
            elif idx.size == m:
                view = FitView(state, pod, rows, table, req, fits, g)
            else:
                view = FitView(state, pod, rows[idx], table, req, fits[idx], g.subset(idx))
            return view.rows, self.refine(ctx, view, policy.choose(view))

        declared = policy_key(policy, pod, req)  # what of the pod and of its model the policy reads
        if declared is not None and ctx.cache.get(f"{self.type} allowed") is not None:
            declared = (declared, pod.gpu_selection)  # its fitting cards depend on its selection too
        if declared is None:
            _, choice = compute(ok)
            scores[ok] = choice.scores
            cols[ok] = choice.columns
            return
        e_scores, e_cols, e_version = state.caches.per_node(
            "policy answers", (self.type, declared, ctx.settings),
            lambda n: (np.zeros(n), np.zeros((n, req.count), np.int64), np.full(n, -1, np.int64)))
        okrows = rows[ok]
        version = state.row_version[okrows]
        miss = e_version[okrows] != version
        if miss.any():
            idx = ok[miss]
            r, choice = compute(idx, stale_elsewhere(state, e_version, rows[idx]))
            e_scores[r] = choice.scores
            e_cols[r] = choice.columns
            e_version[r] = state.row_version[r]
        scores[ok] = e_scores[okrows]
        cols[ok] = e_cols[okrows]

    def _search(self, ctx: Context, table: DeviceTable, row: int,
                needs: list[tuple[int, DeviceRequest]], first: bool = False) -> SearchResult | None:
        """Seed 000's DFS on one node (``first``: stop at the first feasible combination)."""
        n = table.count(row)
        tot_mem = table.total_mem[row, :n]
        usable = table.usable()[row, :n]
        allowed = ctx.cache.get(f"{self.type} allowed")
        if allowed is not None:
            usable = usable & allowed[row, :n]
        return search(
            table.total_core[row, :n] - table.used_core[row, :n],
            table.total_mem[row, :n] - table.used_mem[row, :n],
            ctx.state.max_containers - table.used_slots[row, :n],
            table.total_core[row, :n],
            tot_mem,
            usable,
            (table.used_slots[row, :n] == 0) & (table.used_core[row, :n] == 0) & (table.used_mem[row, :n] == 0),
            [Need(c, r.count, r.core_milli, np.broadcast_to(memory_need(r, tot_mem), tot_mem.shape), r.whole)
             for c, r in needs],
            core_weight=ctx.settings.core_weight,
            binpack=ctx.settings.card_binpack,
            budget=ctx.settings.dfs_budget,
            first=first,
        )
