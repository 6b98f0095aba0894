"""Hand-made trace clusters, one pod's per-node scores under a policy, and the view a policy is handed,
for the policy tests."""

from __future__ import annotations

import math

from devshare.engine.fit import FitView, fitting
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.request import DeviceRequest
from devshare.sim.replay import build_state, pod_request
from devshare.sim.trace import Trace, TraceNode, TracePod
from support.cluster import hold
from support.cluster import pod as device_pod


def cluster(nodes: list[tuple[int, int, str]], used: dict[tuple[int, int], int] | None = None) -> ClusterState:
    """nodes: (cpu milli, gpus, model); used: (node, card) -> milli-GPU already taken."""
    tr = Trace("t", tuple(TraceNode(f"n{i}", c, 1 << 20, g, m) for i, (c, g, m) in enumerate(nodes)), ())
    state = build_state(tr)
    for k, ((n, c), v) in enumerate((used or {}).items()):
        grant = DeviceGrant(type="gpu", minor=c, id=f"n{n}-gpu{c}", core_milli=v)
        alloc = PodAllocation(node=f"n{n}", containers=(ContainerAllocation(name="main", devices=(grant,)),))
        hold(state, pod_request(TracePod(f"used{k}", 0, 0, 1, v)), alloc)
    return state


def pod(cpu: int, num: int, milli: int, spec: tuple[str, ...] = ()) -> TracePod:
    return TracePod("p", cpu, 0, num, milli, spec)


def scores(state: ClusterState, policy: object, p: TracePod) -> list[float]:
    """The policy's score of every node for ``p`` (NaN where the pod does not fit)."""
    s = Scheduler(state, policy=policy)  # type: ignore[arg-type]
    ev = s.evaluate(pod_request(p), state.node_rows())
    return [float(x) if c == 0 else math.nan for x, c in zip(ev.scores, ev.codes, strict=True)]


def view(state: ClusterState, ask: DeviceRequest) -> FitView:
    """What the engine hands a policy for a pod of one container asking ``ask``, over every node."""
    rows = state.node_rows()
    g, fits, _ = fitting(state.table("gpu"), rows, None, ask, max_containers=16)
    return FitView(state, device_pod("p", ask), rows, g.table, ask, fits, g)
