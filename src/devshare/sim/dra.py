"""kube-scheduler's own DRA allocation in the replay (``devshare simulate --dra-baseline``, issue 38).

Stock kube-scheduler allocates a claim inside its filter (``DynamicResources``): a node is feasible
only if the claim's devices fit there. So its window of ``percentageOfNodesToScore`` feasible nodes
(:class:`devshare.sim.window.Window`) counts the nodes where the pod's GPUs fit, not only its CPU and
memory as with an extender. :class:`DraWindow` is that walk; the choice among the window's nodes and
the device on the chosen node are :class:`~devshare.engine.policies.firstfit.DraBaselinePolicy`'s.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from devshare.engine.handlers.base import SUCCESS
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.request import PodRequest
from devshare.sim.window import ADAPTIVE, Window


class DraWindow(Window):
    def __init__(self, state: ClusterState, scheduler: Scheduler, percentage: int = ADAPTIVE) -> None:
        super().__init__(state, percentage)
        self.scheduler = scheduler

    def feasible(self, pod: PodRequest) -> npt.NDArray[np.bool_]:
        ok = super().feasible(pod)
        if pod.has_devices() and self.order.size:
            ev = self.scheduler.evaluate(pod, self.order)
            ok &= ev.codes == SUCCESS
        return ok

