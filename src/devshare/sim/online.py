"""The trace replay as devshare's DRA allocator meets it in a live cluster (issue 38, bench/bench_dra.py).

Online, devshare allocates the claims of GPU pods, but a pod asking no device never reaches it: stock
kube-scheduler places it (LeastAllocated + BalancedAllocation on CPU and memory, within its window),
and devshare's learning policy never sees it arrive. ``devshare simulate`` places every pod with the
policy; :func:`replay_online` places them as the live cluster does, on one state.
"""

from __future__ import annotations

import time

from devshare.engine.handlers.base import Settings
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.policies.firstfit import DraBaselinePolicy
from devshare.engine.policies.protocol import Policy
from devshare.engine.scheduler import Scheduler
from devshare.sim.dra import DraWindow
from devshare.sim.replay import MAX_ARRIVED, RunResult, arrival_order, build_state, pod_request
from devshare.sim.trace import Trace
from devshare.sim.window import schedule


def replay_online(trace: Trace, policy: Policy, seed: int) -> RunResult:
    """The replay as devshare's DRA allocator meets it online: a GPU pod's claim is placed by devshare's
    engine and ``policy`` over every node (the allocator is not windowed), a CPU-only pod by stock
    kube-scheduler (:class:`DraBaselinePolicy` within its window: devshare is never asked about it, and
    its policy never sees it arrive), both on one state. ``devshare simulate`` places every pod with the
    policy; this is what the live comparison of issue 38 is checked against."""
    started = time.perf_counter()
    state = build_state(trace)
    # node ranks stay in creation order, as in the live extender (the replay permutes them by seed)
    settings = Settings(topology=False)
    ours = Lifecycle(Scheduler(state, policy=policy, settings=settings))
    stock = Lifecycle(Scheduler(state, policy=DraBaselinePolicy(seed), settings=settings))
    win = DraWindow(state, stock.scheduler)
    cap = trace.gpu_capacity
    curve = [0.0] * (MAX_ARRIVED + 1)
    recorded = -1
    arrived = allocated = placed = n = 0
    for name, tp in arrival_order(trace, seed):
        pod = pod_request(tp, name)
        n += 1
        where = ours.schedule(pod, now=0.0) if pod.has_devices() else schedule(stock, win, pod)
        if where is not None:
            allocated += tp.gpu_total
            placed += 1
        arrived += tp.gpu_total
        pct = min(arrived * 100 // cap, MAX_ARRIVED)
        if pct > recorded:
            for k in range(recorded + 1, pct + 1):
                curve[k] = allocated * 100.0 / cap
            recorded = pct
        if recorded >= MAX_ARRIVED:
            break
    for k in range(recorded + 1, MAX_ARRIVED + 1):
        curve[k] = allocated * 100.0 / cap
    return RunResult(trace.name, f"{getattr(policy, 'name', 'policy')}-online", seed, curve, n, placed,
                     time.perf_counter() - started)
