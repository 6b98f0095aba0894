"""Placing a pod's ResourceClaims with the engine that places extended-resource pods.

A pod's claims that devshare allocates become one :class:`~devshare.model.request.PodRequest`: one
"container" per claim request (``<claim>/<request>``), asking ``count`` devices of the class's type
with the request's capacity (compute in thousandths, memory in bytes). The engine's scheduler then
filters and scores every candidate node with the configured policy exactly as for a pod asking
``koordinator.sh/gpu-core``: the same card admission rule, the same node policy, the same seed-003
topology choice for several GPUs. What DRA adds is turned into things the engine already has:

- CEL selectors (the class's and the request's) decide which devices a request may take: the
  GPUs that match become the pod's GPU selection (its ``use_ids``), and nodes without enough
  matching devices are not candidates;
- ``allocationMode: All`` asks for every matching device of the node: nodes are grouped by that
  number and each group is evaluated with its count;
- ``matchAttribute`` constraints: the matching devices are split by the attribute's value and each
  value is tried as its own selection; ``distinctAttribute`` is checked on the choice;
- ``firstAvailable``: the alternatives are tried in order, the first that fits anywhere wins.

Every choice is checked again device by device before it is returned (:func:`_verify`); the
accounting itself (all or nothing, never beyond a card's capacity) is the state's, when the caller
assumes the records (:meth:`devshare.engine.lifecycle.Lifecycle.assume`). A claim's record in the
state is keyed :func:`~devshare.model.dra.claim_record_key`, so extended-resource pods and claims
are counted in the same arrays.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from devshare.engine.dra.cel import CelError
from devshare.engine.dra.inventory import Inventory
from devshare.engine.handlers.base import SUCCESS
from devshare.engine.scheduler import PodEvaluation, Scheduler
from devshare.engine.state import ClusterState
from devshare.model import dra, names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.dra import Claim, NodeFilter, Request, Result
from devshare.model.draslices import SliceDevice
from devshare.model.request import WHOLE, ContainerRequest, DeviceRequest, GpuSelection, PodRequest

MAX_VARIANTS = 64  # combinations of firstAvailable alternatives and constraint values tried
VERIFY_TRIES = 32  # candidates checked device by device before giving up on a variant


class Refusal(Exception):
    """The claims cannot be allocated. ``permanent``: they never can as written (a bad selector, an
    unsupported feature, a class devshare does not serve) rather than not now."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.permanent = permanent


@dataclass(frozen=True)
class PodAsk:
    """One pod's claims to allocate."""

    namespace: str
    name: str
    uid: str
    claims: tuple[Claim, ...]  # unallocated claims of devshare's classes
    node: str = ""  # a node already chosen by other claims of the pod ("": any)
    nodes: NodeFilter = field(default_factory=NodeFilter)
    cpu_milli: int = 0
    memory_bytes: int = 0
    priority: int = 0


@dataclass(frozen=True)
class Resolved:
    claim: Claim
    request: Request
    device_type: str
    whole: bool
    core_milli: int
    memory: int
    selectors: tuple[str, ...]

    @property
    def container(self) -> str:
        return f"{self.claim.name}/{self.request.name}"

    def consumed(self, grant: DeviceGrant) -> dict[str, Fraction]:
        if self.device_type == names.GPU:
            return {dra.COMPUTE: Fraction(grant.core_milli, 10), dra.MEMORY: Fraction(grant.memory)}
        return {dra.SHARE: Fraction(grant.core_milli, 10)}


@dataclass(frozen=True)
class ClaimDecision:
    claim: Claim
    record: PodRequest  # the claim as the state counts it (key: claim_record_key)
    allocation: PodAllocation
    results: tuple[Result, ...]


@dataclass(frozen=True)
class Decision:
    node: str
    request: PodRequest  # the pod's claims as one request (what the policy sees arrive)
    claims: tuple[ClaimDecision, ...]
    score: float


def resolve(inv: Inventory, claim: Claim, req: Request) -> Resolved:
    """The engine's ask for one request (raises a permanent :class:`Refusal` when it cannot be served)."""
    where = f"claim {claim.key}, request {req.name}"
    cls = inv.classes.get(req.device_class)
    shipped = dra.shipped_classes().get(req.device_class)
    if cls is None and shipped is None:
        raise Refusal(f"{where}: DeviceClass {req.device_class} does not exist")
    dtype = cls.device_type if cls is not None and cls.device_type else shipped[0] if shipped else ""
    whole = cls.whole if cls is not None and cls.device_type else bool(shipped and shipped[1])
    if not dtype:
        raise Refusal(f"{where}: DeviceClass {req.device_class} is not one of devshare's (label "
                      f"{dra.DEVICE_TYPE_LABEL}); a claim mixing it with devshare's classes cannot be allocated",
                      permanent=True)
    if req.admin_access:
        raise Refusal(f"{where}: adminAccess is not supported by devshare's allocator", permanent=True)
    caps = dict(req.capacity)
    allowed = {dra.COMPUTE, dra.MEMORY} if dtype == names.GPU else {dra.SHARE}
    unknown = sorted(k for k in caps
                     if k.rpartition("/")[2] not in allowed or k.rpartition("/")[0] not in ("", dra.DRIVER))
    if unknown:
        raise Refusal(f"{where}: capacity {', '.join(unknown)} is not offered by {dra.DRIVER} "
                      f"(it offers {', '.join(sorted(allowed))})", permanent=True)
    caps = {k.rpartition("/")[2]: v for k, v in caps.items()}
    if any(v < 0 for v in caps.values()):
        raise Refusal(f"{where}: a capacity request must not be negative", permanent=True)
    if whole:
        if caps:
            raise Refusal(f"{where}: DeviceClass {req.device_class} gives whole devices; ask capacity through "
                          f"{dra.CLASS_GPU} instead", permanent=True)
        core, memory, ratio_whole = WHOLE, 0, True
    else:
        pct = caps.get(dra.COMPUTE if dtype == names.GPU else dra.SHARE, dra.whole_compute())
        if pct > 100:
            raise Refusal(f"{where}: {pct} percent of one device is more than a device; ask for count "
                          f"devices instead", permanent=True)
        core = dra.compute_milli(pct)
        memory = dra.memory_bytes(caps[dra.MEMORY]) if dra.MEMORY in caps else 0
        ratio_whole = False
        if core == 0 and memory == 0:
            raise Refusal(f"{where}: asks neither compute nor memory", permanent=True)
    expressions = tuple((cls.selectors if cls is not None else ()) + req.selectors)
    return Resolved(claim, req, dtype, whole or ratio_whole, core, memory, expressions)


def _device_request(r: Resolved, count: int) -> DeviceRequest:
    if r.whole:
        return DeviceRequest(type=r.device_type, count=count, core_milli=WHOLE, memory_ratio_milli=WHOLE)
    return DeviceRequest(type=r.device_type, count=count, core_milli=r.core_milli, memory=r.memory)


def allocate(scheduler: Scheduler, inv: Inventory, ask: PodAsk, *,
             share_id: Callable[[], str], nodes: Iterable[str] | None = None) -> Decision:
    """The node and devices for ``ask``'s claims, by ``scheduler``'s policy. Raises :class:`Refusal`."""
    state = scheduler.state
    alternatives: list[list[Resolved]] = []
    for claim in ask.claims:
        for alts in claim.requests:
            alternatives.append([resolve(inv, claim, r) for r in alts])
    if not alternatives:
        raise Refusal("the pod's claims ask for no device", permanent=True)
    candidates = [n for n in (nodes if nodes is not None else sorted(state.row_of))
                  if (not ask.node or n == ask.node) and n in state.nodes
                  and ask.nodes.allows(n, state.nodes[n].labels)]
    if not candidates:
        where = f"node {ask.node} (where another claim of the pod is allocated)" if ask.node else "any node"
        raise Refusal(f"no node may take the pod: {where} is excluded by its nodeSelector or affinity, or unknown")
    reasons: list[str] = []
    for n_variant, variant in enumerate(itertools.product(*alternatives)):
        if n_variant >= MAX_VARIANTS:
            break
        try:
            found = _place_variant(scheduler, inv, ask, list(variant), candidates, reasons, share_id)
        except CelError as e:
            raise Refusal(f"claim {variant[0].claim.key}: {e}", permanent=True) from None
        if found is not None:
            return found
    raise Refusal("; ".join(dict.fromkeys(reasons)) or "no node has the devices the claims ask for")


def _constraints_of(variant: list[Resolved]) -> list[tuple[str, list[int]]]:
    """(attribute, indexes into ``variant``) of every matchAttribute constraint."""
    out = []
    for claim in {r.claim.key: r.claim for r in variant}.values():
        for c in claim.constraints:
            if not c.match_attribute:
                continue
            idx = [i for i, r in enumerate(variant) if r.claim is claim and
                   (not c.requests or r.request.name.split("/")[0] in c.requests)]
            if idx:
                out.append((c.match_attribute, idx))
    return out


def _place_variant(scheduler: Scheduler, inv: Inventory, ask: PodAsk, variant: list[Resolved], nodes: list[str],
                   reasons: list[str], share_id: Callable[[], str]) -> Decision | None:
    state = scheduler.state
    matching: list[dict[str, list[SliceDevice]]] = []
    for r in variant:
        found, error = inv.matching(state, r.device_type, r.selectors, nodes)
        if not found:
            why = f"no {r.device_type} device on {'node ' + ask.node if ask.node else 'any node'} matches the " \
                  f"selectors of claim {r.claim.key} request {r.request.name}"
            reasons.append(f"{why} ({error})" if error else why)
            return None
        matching.append(found)
    best: tuple[float, int, PodRequest, PodEvaluation, list[Resolved], list[int], list[int]] | None = None
    for part in _partitions(variant, matching):
        for counts, group in _groups(variant, part):
            preq = _pod_request(state, ask, variant, counts, part, group)
            rows = state.node_rows(group)
            ev = scheduler.evaluate(preq, rows)
            ok = np.flatnonzero(ev.codes == SUCCESS)
            if ok.size == 0:
                reasons.append(scheduler.why_unschedulable(preq, group))
                continue
            order = ok[np.lexsort((state.rank[rows[ok]], -ev.scores[ok]))][:VERIFY_TRIES]
            for i in order.tolist():
                alloc = ev.allocation(state, i)
                if _verify(inv, variant, counts, part, alloc) is None:
                    score, rank = float(ev.scores[i]), int(state.rank[rows[i]])
                    if best is None or (score, -rank) > (best[0], -best[1]):
                        best = (score, rank, preq, ev, variant, counts, [i])
                    break
            else:
                reasons.append(f"claims of pod {ask.namespace}/{ask.name}: the devices chosen did not satisfy "
                               f"the requests' selectors together")
    if best is None:
        return None
    score, _, preq, ev, _, counts, (i,) = best
    alloc = ev.allocation(state, i)
    return _decision(preq, variant, alloc, score, share_id)


def _partitions(variant: list[Resolved], matching: list[dict[str, list[SliceDevice]]]
                ) -> Iterable[list[dict[str, list[SliceDevice]]]]:
    """The matching devices split by the values of the matchAttribute constraints (every value
    combination that leaves each request something on some node), or once whole without constraints."""
    constraints = _constraints_of(variant)
    if not constraints:
        yield matching
        return
    values: list[list[object]] = []
    for attr, idx in constraints:
        seen: set[object] = set()
        for i in idx:
            for devs in matching[i].values():
                for d in devs:
                    v = d.attribute(attr)
                    if v is not None:
                        seen.add(v)
        values.append(sorted(seen, key=repr))
    for n, combo in enumerate(itertools.product(*values)):
        if n >= MAX_VARIANTS:
            return
        part = [dict(m) for m in matching]
        for (attr, idx), value in zip(constraints, combo, strict=True):
            for i in idx:
                part[i] = {node: kept for node, devs in part[i].items()
                           if (kept := [d for d in devs if d.attribute(attr) == value])}
        if all(part):
            yield part


def _groups(variant: list[Resolved], part: list[dict[str, list[SliceDevice]]]) -> list[tuple[list[int], list[str]]]:
    """Candidate nodes grouped by the device count of each request there (``All``: every matching
    device of the node), keeping only nodes with enough matching devices for every request."""
    common = set(part[0])
    for p in part[1:]:
        common &= set(p)
    groups: dict[tuple[int, ...], list[str]] = {}
    for node in sorted(common):
        counts = []
        for r, p in zip(variant, part, strict=True):
            have = len(p[node])
            want = have if r.request.all_devices else r.request.count
            if want > have or want == 0:
                break
            counts.append(want)
        else:
            groups.setdefault(tuple(counts), []).append(node)
    return [(list(k), v) for k, v in groups.items()]


def _pod_request(state: ClusterState, ask: PodAsk, variant: list[Resolved], counts: list[int],
                 part: list[dict[str, list[SliceDevice]]], group: list[str]) -> PodRequest:
    containers = tuple(ContainerRequest(name=r.container, devices=(_device_request(r, c),))
                       for r, c in zip(variant, counts, strict=True))
    gpu_ids: set[str] = set()
    narrowed = False
    for r, p in zip(variant, part, strict=True):
        if r.device_type != names.GPU:
            continue
        for node in group:
            gpu_ids.update(d.uuid for d in p.get(node, ()))
    if gpu_ids:
        state_ids = {i for node in group for i in _gpu_ids(state, node)}
        narrowed = bool(state_ids - gpu_ids)
    return PodRequest(namespace=ask.namespace, name=ask.name, uid=ask.uid, containers=containers, dialect="dra",
                      gpu_selection=GpuSelection(use_ids=tuple(sorted(gpu_ids))) if narrowed else None,
                      cpu_milli=ask.cpu_milli, memory_bytes=ask.memory_bytes, priority=ask.priority)


def _gpu_ids(state: ClusterState, node: str) -> list[str]:
    """The ids of ``node``'s GPUs as the state counts them."""
    row = state.row_of.get(node)
    table = state.tables.get(names.GPU)
    if row is None or table is None:
        return []
    return list(table.ids[row][: table.count(row)])


def _verify(inv: Inventory, variant: list[Resolved], counts: list[int], part: list[dict[str, list[SliceDevice]]],
            alloc: PodAllocation) -> str | None:
    """Why ``alloc`` does not satisfy the requests (None when it does): every device granted to a
    request is one its selectors (and constraints' values) allow, each request got its count, and
    ``distinctAttribute`` values differ."""
    for ci, (r, want, p) in enumerate(zip(variant, counts, part, strict=True)):
        grants = alloc.containers[ci].devices
        allowed = {d.name for d in p.get(alloc.node, ())}
        if len(grants) != want:
            return f"request {r.request.name} got {len(grants)} devices, asked {want}"
        for g in grants:
            if dra.device_name(g.type, g.minor) not in allowed:
                return f"{g.type} {g.minor} does not match request {r.request.name}"
    for claim in {r.claim.key: r.claim for r in variant}.values():
        for c in claim.constraints:
            if not c.distinct_attribute:
                continue
            seen: list[object] = []
            for ci, r in enumerate(variant):
                if r.claim is not claim or (c.requests and r.request.name.split("/")[0] not in c.requests):
                    continue
                for g in alloc.containers[ci].devices:
                    d = inv.device(alloc.node, g.type, g.minor)
                    v = d.attribute(c.distinct_attribute) if d is not None else None
                    if v is None or v in seen:
                        return f"distinctAttribute {c.distinct_attribute} is not distinct"
                    seen.append(v)
    return None


def _decision(preq: PodRequest, variant: list[Resolved], alloc: PodAllocation, score: float,
              share_id: Callable[[], str]) -> Decision:
    per_claim: dict[str, tuple[Claim, list[ContainerAllocation], list[Result]]] = {}
    for ci, r in enumerate(variant):
        grants = tuple(_plain(g, r.whole) for g in alloc.containers[ci].devices)
        entry = per_claim.setdefault(r.claim.key, (r.claim, [], []))
        entry[1].append(ContainerAllocation(name=r.request.name, devices=grants))
        for g in grants:
            entry[2].append(Result(request=r.request.name, driver=dra.DRIVER, pool=alloc.node,
                                   device=dra.device_name(g.type, g.minor), share_id=share_id(),
                                   consumed=r.consumed(g)))
    claims = tuple(
        ClaimDecision(claim=claim, record=record_request(claim),
                      allocation=PodAllocation(node=alloc.node, containers=tuple(conts)), results=tuple(results))
        for claim, conts, results in per_claim.values())
    return Decision(node=alloc.node, request=preq, claims=claims, score=score)


def _plain(g: DeviceGrant, whole: bool) -> DeviceGrant:
    """A grant as a claim's allocation says it (and a rebuild reads it back): compute and bytes, the
    memory ratio only to mark a whole device."""
    return DeviceGrant(type=g.type, minor=g.minor, id=g.id, core_milli=g.core_milli, memory=g.memory,
                       memory_ratio_milli=WHOLE if whole else 0)


def record_request(claim: Claim) -> PodRequest:
    """A claim as the state counts it: its own record, in its namespace (quotas), never a pod's key."""
    return PodRequest(namespace=claim.namespace, name=f"{dra.CLAIM_RECORD}{claim.name}", uid=claim.uid, dialect="dra")


# ------------------------------------------------------------------ allocations already made
def recorded(state: ClusterState, inv: Inventory, claim: Claim) -> PodAllocation | None:
    """What an allocated claim holds of devshare's devices, as an allocation on one node (None when it
    holds none): devshare's own devices by name and consumed capacity (none consumed: the whole
    device), and devices another driver publishes for a GPU devshare counts (matched by UUID:
    counted whole). A claim devshare did not allocate is counted all the same (kube-scheduler's
    allocator, another controller): what is consumed is consumed."""
    a = claim.allocation
    if a is None:
        return None
    node = a.node
    conts: dict[str, list[DeviceGrant]] = {}
    for res in a.results:
        grant: DeviceGrant | None = None
        if res.driver == dra.DRIVER:
            d = inv.by_ref.get((res.driver, res.pool, res.device))
            typed = ((d.device_type, d.minor) if d is not None and d.minor is not None
                     else dra.parse_device_name(res.device))
            where = d.node if d is not None and d.node else node or res.pool
            if typed is None:
                continue
            node = node or where
            grant = _grant_of(state, node, typed[0], typed[1], res.consumed)
        else:
            d = inv.by_ref.get((res.driver, res.pool, res.device))
            if d is None or not d.uuid:
                continue
            hit = _find_uuid(state, d.uuid)
            if hit is None:
                continue
            node = node or hit[0]
            if hit[0] != node:
                continue
            grant = _grant_of(state, node, hit[1], hit[2], {})
        if grant is not None:
            conts.setdefault(res.request, []).append(grant)
    if not conts or not node:
        return None
    return PodAllocation(node=node, containers=tuple(ContainerAllocation(name=k, devices=tuple(v))
                                                     for k, v in conts.items()))


def _grant_of(state: ClusterState, node: str, dtype: str, minor: int, consumed: dict[str, Fraction]) -> DeviceGrant:
    row = state.row_of.get(node)
    table = state.tables.get(dtype)
    col = table.column_of(row, minor) if table is not None and row is not None else -1
    total_core = int(table.total_core[row, col]) if table is not None and row is not None and col >= 0 else WHOLE
    total_mem = int(table.total_mem[row, col]) if table is not None and row is not None and col >= 0 else 0
    dev_id = table.ids[row][col] if table is not None and row is not None and col >= 0 else ""
    if not consumed:
        return DeviceGrant(type=dtype, minor=minor, id=dev_id, core_milli=total_core, memory=total_mem,
                           memory_ratio_milli=WHOLE if total_mem else 0)
    share = consumed.get(dra.COMPUTE if dtype == names.GPU else dra.SHARE)
    core = dra.compute_milli(share) if share is not None else total_core
    memory = dra.memory_bytes(consumed[dra.MEMORY]) if dra.MEMORY in consumed else 0
    whole = core >= total_core and (memory >= total_mem if dtype == names.GPU else True)
    return DeviceGrant(type=dtype, minor=minor, id=dev_id, core_milli=core, memory=memory,
                       memory_ratio_milli=WHOLE if whole else 0)


def _find_uuid(state: ClusterState, uuid: str) -> tuple[str, str, int] | None:
    for dtype, table in state.tables.items():
        for node, row in state.row_of.items():
            n = table.count(row)
            ids = table.ids[row][:n] if row < len(table.ids) else []
            if uuid in ids:
                return node, dtype, int(table.minor[row, ids.index(uuid)])
    return None
