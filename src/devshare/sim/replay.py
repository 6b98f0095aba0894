"""Replaying a trace the way the FGD paper does, through the engine's real scheduling path.

Pods are sorted by name, shuffled with the seed, then random clones (uniform, with replacement, from
the original trace) are appended until the requested GPU reaches 130% of the cluster's. Pods are
placed one at a time with :meth:`Lifecycle.schedule` (the code path the extender runs: the policy
learns of the pod, the best node is chosen, assumed and confirmed); one that fits nowhere is skipped.
The allocation % is recorded at every integer arrived % from 0 to 130.

``window``: kube-scheduler's ``percentageOfNodesToScore`` (0 = its adaptive default), modelled by
:mod:`devshare.sim.window`: each pod's candidates are the nodes kube-scheduler's rotating walk finds,
retried window after window until every node was walked. None (the default): every node is a candidate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from devshare.engine.handlers.base import Settings
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.policies.base import Policy
from devshare.engine.policies.firstfit import DraBaselinePolicy
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model import names
from devshare.model.device import DeviceInfo, NodeDevices
from devshare.model.node import NodeInfo
from devshare.model.request import WHOLE, ContainerRequest, DeviceRequest, PodRequest
from devshare.sim.dra import DraWindow
from devshare.sim.trace import MIB, MILLI, Trace, TracePod
from devshare.sim.window import ADAPTIVE, Window, schedule

MAX_ARRIVED = 130  # percent of cluster GPU capacity
NAMESPACE = "openb"
NO_LIMIT = 1 << 30  # the paper's replay puts no limit on pods per GPU


@dataclass
class RunResult:
    trace: str
    policy: str
    seed: int
    allocated_pct: list[float]  # index = arrived %, 0..130
    pods_arrived: int = 0
    pods_placed: int = 0
    seconds: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def unallocated_at_100(self) -> float:
        return 100.0 - self.allocated_pct[100]


def build_state(trace: Trace) -> ClusterState:
    """Engine nodes for the trace's nodes: CPU and memory tracked, ``gpu`` cards of 1000 milli."""
    state = ClusterState(max_containers_per_device=NO_LIMIT)
    for n in trace.nodes:
        labels = {names.NODE_GPU_MODEL: n.model} if n.model else {}
        state.upsert_node(NodeInfo(name=n.name, labels=labels, gpu_model=n.model, cpu_milli=n.cpu_milli,
                                   memory_bytes=n.memory_mib * MIB))
        if n.gpus:
            devs = tuple(DeviceInfo(type=names.GPU, minor=i, id=f"{n.name}-gpu{i}", core_milli=MILLI,
                                    memory=0, model=n.model) for i in range(n.gpus))
            state.set_devices(NodeDevices(node=n.name, devices=devs))
    return state


def pod_request(p: TracePod, name: str | None = None) -> PodRequest:
    """The engine's request for a trace pod (whole cards exclusive, shares of one card)."""
    devices: tuple[DeviceRequest, ...] = ()
    if p.num_gpu:
        whole = p.gpu_milli >= MILLI
        devices = (DeviceRequest(type=names.GPU, count=p.num_gpu, core_milli=p.gpu_milli,
                                 memory_ratio_milli=WHOLE if whole else 0),)
    return PodRequest(namespace=NAMESPACE, name=name or p.name,
                      containers=(ContainerRequest(name="main", devices=devices),),
                      gpu_models=p.gpu_spec, cpu_milli=p.cpu_milli, memory_bytes=p.memory_mib * MIB)


def arrival_order(trace: Trace, seed: int) -> list[tuple[str, TracePod]]:
    """The pods in arrival order for ``seed``: sorted, shuffled, inflated to 130% with clones."""
    rng = np.random.default_rng(seed)
    base = sorted(trace.pods, key=lambda p: p.name)
    order = [base[i] for i in rng.permutation(len(base))]
    out = [(p.name, p) for p in order]
    target = trace.gpu_capacity * MAX_ARRIVED // 100
    total = sum(p.gpu_total for p in base)
    if not any(p.gpu_total for p in base):
        return out
    k = 0
    while total < target:
        draws = rng.integers(0, len(base), size=1024)
        for i in draws.tolist():
            p = base[i]
            k += 1
            out.append((f"{p.name}-clone-{k}", p))
            total += p.gpu_total
            if total >= target:
                break
    return out


def node_rank(state: ClusterState, seed: int) -> None:
    """Each seed permutes the node list once; the lowest position among the top scores wins."""
    rows = state.node_rows()
    perm = np.random.default_rng([seed, 1]).permutation(rows.size)
    state.rank[rows] = perm


Progress = Callable[[int], None]


def replay(trace: Trace, policy: Policy, seed: int, *, progress: Progress | None = None,
           settings: Settings | None = None, window: int | None = None) -> RunResult:
    """Replay ``trace`` with ``policy`` for ``seed``; ``progress`` gets the arrived % as it grows;
    ``window``: kube-scheduler's percentageOfNodesToScore (0: its adaptive default; None: every node)."""
    started = time.perf_counter()
    state = build_state(trace)
    node_rank(state, seed)
    sched = Scheduler(state, policy=policy, settings=settings or Settings(topology=False))
    lifecycle = Lifecycle(sched)
    win = None if window is None else Window(state, window)
    if isinstance(policy, DraBaselinePolicy):  # DRA (issue 38): stock kube-scheduler's window is GPU-aware
        win = DraWindow(state, sched, ADAPTIVE if window is None else window)
    cap = trace.gpu_capacity
    curve = [0.0] * (MAX_ARRIVED + 1)
    recorded = -1
    arrived = allocated = placed = n = 0
    first_skip = float(MAX_ARRIVED)  # arrived % before the first pod that fit nowhere (the floor's premise)
    for name, tp in arrival_order(trace, seed):
        pod = pod_request(tp, name)
        n += 1
        where = lifecycle.schedule(pod, now=0.0) if win is None else schedule(lifecycle, win, pod)
        if where is not None:
            allocated += tp.gpu_total
            placed += 1
        elif first_skip >= MAX_ARRIVED:
            first_skip = arrived * 100.0 / cap
        arrived += tp.gpu_total
        pct = min(arrived * 100 // cap, MAX_ARRIVED)
        if pct > recorded:
            value = allocated * 100.0 / cap
            for k in range(recorded + 1, pct + 1):
                curve[k] = value
            recorded = pct
            if progress is not None:
                progress(pct)
        if recorded >= MAX_ARRIVED:
            break
    value = allocated * 100.0 / cap
    for k in range(recorded + 1, MAX_ARRIVED + 1):
        curve[k] = value
    extra = {"first_skip_pct": round(first_skip, 4)}
    if win is not None:
        extra.update(window_percentage=float(win.percentage), window_nodes=float(win.k),
                     window_cycles_per_pod=round(win.cycles / max(win.pods, 1), 4),
                     window_later_pods=float(win.later))
    return RunResult(trace.name, getattr(policy, "name", type(policy).__name__), seed, curve, n, placed,
                     time.perf_counter() - started, extra)
