"""The trace replay as devshare meets it in a live cluster where the pods asking no device go to another
scheduler (issue 38's bench/bench_dra.py, issue 41's bench/bench_replay.py ``--cpu-pods default-scheduler``).

Online, devshare allocates the claims of GPU pods, but a pod asking no device never reaches it: stock
kube-scheduler places it (LeastAllocated + BalancedAllocation on CPU and memory, within its window),
and devshare's learning policy never sees it arrive. ``devshare simulate`` places every pod with the
policy; :func:`replay_online` places them as the live cluster does, on one state.
"""

from __future__ import annotations

import time

from devshare.engine.handlers.base import Settings
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.policies.base import Policy
from devshare.engine.policies.firstfit import DraBaselinePolicy
from devshare.engine.scheduler import Scheduler
from devshare.sim.dra import DraWindow
from devshare.sim.replay import MAX_ARRIVED, RunResult, arrival_order, build_state, pod_request
from devshare.sim.trace import Trace
from devshare.sim.window import Window, schedule


def replay_online(trace: Trace, policy: Policy, seed: int, *, window: int | None = None,
                  steered: bool = False) -> RunResult:
    """The replay as devshare meets it online when the pods asking no device go to another scheduler: a
    GPU pod is placed by devshare's engine and ``policy``, a CPU-only pod by stock kube-scheduler's default
    profile (:class:`DraBaselinePolicy` within its window: devshare is never asked about it, and its
    policy never sees it arrive), both on one state. ``window``: GPU pods among kube-scheduler's window
    of candidates (the extender's case, bench/bench_replay.py ``--cpu-pods default-scheduler``; 0: its
    adaptive one); None: over every node (devshare's DRA allocator, issue 38). ``steered``: the nodes
    devshare marks with its PreferNoSchedule taint (:mod:`devshare.engine.steering`) are scored so by
    kube-scheduler. ``devshare simulate`` places every pod with the policy."""
    started = time.perf_counter()
    state = build_state(trace)
    # node ranks stay in creation order, as in the live extender (the replay permutes them by seed)
    settings = Settings(topology=False)
    ours = Lifecycle(Scheduler(state, policy=policy, settings=settings))
    stock = Lifecycle(Scheduler(state, policy=DraBaselinePolicy(seed, steered=steered), settings=settings))
    win = DraWindow(state, stock.scheduler)
    gpu_window = None if window is None else Window(state, window)
    cap = trace.gpu_capacity
    curve = [0.0] * (MAX_ARRIVED + 1)
    recorded = -1
    arrived = allocated = placed = n = 0
    for name, tp in arrival_order(trace, seed):
        pod = pod_request(tp, name)
        n += 1
        if not pod.has_devices():
            where = schedule(stock, win, pod)
        elif gpu_window is None:
            where = ours.schedule(pod, now=0.0)
        else:
            where = schedule(ours, gpu_window, pod)
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
