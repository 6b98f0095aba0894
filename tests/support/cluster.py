"""Builders for engine-level tests: nodes with GPUs, pods with device asks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from devshare.engine.groups import GroupPlanner
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.scheduler import UNKNOWN_NODE, FilterOutcome, Scheduler
from devshare.engine.state import ClusterState
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.device import DeviceInfo, NodeDevices
from devshare.model.node import node_info_from_labels
from devshare.model.request import ContainerRequest, DeviceRequest, PodRequest

MiB = 2**20
GiB = 2**30


def add_node(
    state: ClusterState,
    name: str,
    gpus: int | Sequence[int] = 4,
    *,
    memory: int = 16 * GiB,
    labels: dict[str, str] | None = None,
    rdma: int = 0,
    unhealthy: Sequence[int] = (),
    bandwidth: Sequence[Sequence[float]] | None = None,
    model: str = "",
) -> None:
    """A node with ``gpus`` GPUs (a count, or a list of per-GPU memory in bytes)."""
    mems = [memory] * gpus if isinstance(gpus, int) else list(gpus)
    devices = [
        DeviceInfo(type="gpu", minor=i, id=f"GPU-{name}-{i}", memory=m, health=i not in unhealthy, model=model)
        for i, m in enumerate(mems)
    ]
    devices += [DeviceInfo(type="rdma", minor=i, id=f"RDMA-{name}-{i}") for i in range(rdma)]
    state.upsert_node(node_info_from_labels(name, labels))
    state.set_devices(
        NodeDevices(
            node=name,
            devices=tuple(devices),
            gpu_bandwidth=None if bandwidth is None else tuple(tuple(float(x) for x in r) for r in bandwidth),
        )
    )


def gpu(core_pct: float = 0, memory: int = 0, *, count: int = 1, ratio_pct: float = 0) -> DeviceRequest:
    return DeviceRequest(
        type="gpu", count=count, core_milli=round(core_pct * 10), memory=memory,
        memory_ratio_milli=round(ratio_pct * 10),
    )


def whole(count: int = 1) -> DeviceRequest:
    return DeviceRequest(type="gpu", count=count, core_milli=1000, memory_ratio_milli=1000)


def pod(
    name: str, *containers: Sequence[DeviceRequest] | DeviceRequest, ns: str = "default", **kw: object
) -> PodRequest:
    cs = []
    for i, c in enumerate(containers):
        asks = (c,) if isinstance(c, DeviceRequest) else tuple(c)
        cs.append(ContainerRequest(name=f"c{i}", devices=asks))
    return PodRequest(namespace=ns, name=name, containers=tuple(cs), **kw)  # type: ignore[arg-type]


def records(state: ClusterState) -> Lifecycle:
    """The one cache over ``state`` (every record changes through it), for tests that set usage up."""
    return Lifecycle(Scheduler(state))


def occupy(state: ClusterState, p: PodRequest, alloc: PodAllocation) -> str | None:
    """Record ``p`` bound with ``alloc``, as the watch would, whatever it books (the reason, if any)."""
    return records(state).add_watched(p, alloc, checked=False)


def hold(state: ClusterState, p: PodRequest, alloc: PodAllocation, *, now: float = 0.0,
         ttl: float = math.inf) -> None:
    """Assume ``alloc`` for ``p`` (all or nothing: Conflict), until ``now + ttl``."""
    records(state).assume(p, alloc, now=now, ttl=ttl)


def free(state: ClusterState, key: str) -> None:
    """Release whatever ``key`` holds."""
    records(state).release(key)


def bound(state: ClusterState, name: str, node: str, minor: int, *, core: int = 0, memory: int = 0,
          ns: str = "default") -> None:
    """Record a bound pod of ``ns`` holding ``core`` thousandths and ``memory`` bytes of one GPU."""
    p = pod(name, DeviceRequest(type="gpu", core_milli=core, memory=memory), ns=ns)
    grant = DeviceGrant(type="gpu", minor=minor, core_milli=core, memory=memory)
    occupy(state, p, PodAllocation(node=node, containers=(ContainerAllocation(name="c0", devices=(grant,)),)))


def outcome(sched: Scheduler, p: PodRequest, nodes: Sequence[str] | None = None) -> FilterOutcome:
    """The engine's verdicts over ``nodes`` (every node when None) by node name."""
    state = sched.state
    names = sorted(state.row_of, key=state.row_of.__getitem__) if nodes is None else list(nodes)
    known = [n for n in names if n in state.row_of]
    rows = state.node_rows(known)
    v = sched.verdicts(p, rows)
    out = FilterOutcome([known[i] for i in v.passed.tolist()],
                        {known[i]: r for i, r in zip(v.failed.tolist(), v.failed_reasons, strict=True)},
                        dict.fromkeys((n for n in names if n not in state.row_of), UNKNOWN_NODE))
    out.unresolvable.update({known[i]: r for i, r in zip(v.unresolvable.tolist(), v.unresolvable_reasons,
                                                          strict=True)})
    return out


def priorities(sched: Scheduler, p: PodRequest) -> dict[str, int]:
    """The extender's 0..10 priorities of every node, by name."""
    from devshare.server.extender.scores import normalize

    state = sched.state
    rows = state.node_rows()
    ev = sched.evaluate(p, rows)
    norm = normalize(ev.scores, ev.codes == 0)
    return {state.name_of[int(r)]: int(s) for r, s in zip(rows.tolist(), norm.tolist(), strict=True)}


def usage_key(state: ClusterState) -> tuple[Any, ...]:
    """A comparable summary of all usage (tests compare a live state with a rebuilt one)."""
    out: list[Any] = []
    for name in sorted(state.row_of):
        row = state.row_of[name]
        for t in sorted(state.tables):
            tb = state.tables[t]
            n = tb.count(row)
            out.append((name, t, tb.used_core[row, :n].tolist(), tb.used_mem[row, :n].tolist(),
                        tb.used_slots[row, :n].tolist()))
        out.append((name, int(state.cpu_used[row]), int(state.mem_used[row])))
    return tuple(out)


def may_bind(planner: GroupPlanner, key: str) -> bool:
    """True when the group member ``key`` is bound in the state (its gang reached its quorum)."""
    rec = planner.state.pods.get(key)
    return rec is not None and rec.phase == "bound"
