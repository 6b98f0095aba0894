"""The one way an engine is built from the configuration (:mod:`devshare.config`): every command (the
extender, ``devshare schedule``, the webhook, the simulator's devshare policy) calls :func:`build_engine`
or, for the model's part alone, :func:`configure_model`.

The configuration file is read at the edge (the command line) and handed over here; nothing below
this module reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from devshare.config import Configuration
from devshare.engine.handlers.base import Settings
from devshare.engine.lifecycle import Lifecycle
from devshare.engine.policies import make_policy
from devshare.engine.policies.base import Policy
from devshare.engine.quotas import Quota, Quotas
from devshare.engine.refusals import Refusals
from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model import dialects


@dataclass(frozen=True)
class Engine:
    """An engine as the configuration describes it: an empty state, its scheduler and lifecycle, and
    the refusals and knobs the servers read."""

    state: ClusterState
    scheduler: Scheduler
    lifecycle: Lifecycle
    refusals: Refusals
    shortlist: int  # the filter passes only the best K nodes of a pod without soft wishes (0: all)


def configure_model(cfg: Configuration) -> None:
    """Make what the file adds to the model known to this process: the resource names of the
    configured device types (each a dialect, :mod:`devshare.model.dialects.configured`) and how dialect
    annotations name devices (``scheduleMode``, seed 000's MGPUScheduleMode), and whose a bare
    nvidia.com/gpu pod is (``nvidiaGpu``)."""
    dialects.configure_types(cfg.device_types.configured())
    dialects.configure_schedule_mode(cfg.scheduling.schedule_mode)
    dialects.configure_nvidia_gpu(cfg.scheduling.nvidia_gpu)


def settings_of(cfg: Configuration) -> Settings:
    s = cfg.scheduling
    return Settings(core_weight=s.core_weight / 100, card_binpack=cfg.card_binpack(),
                    node_binpack=s.node_policy != "spread", dfs_budget=s.dfs_budget, topology=s.topology)


def policy_of(cfg: Configuration) -> Policy:
    """The node policy (a fresh object: a learning policy holds state), by the one factory of policies."""
    s = cfg.scheduling
    own = cfg.policies.devshare if s.node_policy == "devshare" else cfg.policies.binpack
    # auto: the node policy's own cards; binpack or spread: seed 000's card level under any node policy
    card = None if s.card_policy == "auto" else s.card_policy == "binpack"
    return make_policy(s.node_policy, settings=settings_of(cfg), card_binpack=card, options=_given(own))


def quotas_of(cfg: Configuration) -> Quotas | None:
    """The per-namespace GPU quotas (None when the file sets none)."""
    if not cfg.quotas:
        return None
    return Quotas({ns: Quota(core_milli=q.gpu_core * 10 if q.gpu_core is not None else None,
                             memory=q.memory_bytes()) for ns, q in cfg.quotas.items()})


def refusals_of(cfg: Configuration) -> Refusals:
    return Refusals(disabled_types=cfg.device_types.disabled(), disabled_dialects=cfg.disabled_dialects())


def build_engine(cfg: Configuration | None = None) -> Engine:
    """The engine of ``cfg`` (defaults everywhere when None), with the model configured first."""
    cfg = cfg or Configuration()
    configure_model(cfg)
    state = ClusterState(max_containers_per_device=cfg.scheduling.max_containers_per_card)
    settings = settings_of(cfg)
    scheduler = Scheduler(state, policy=policy_of(cfg), settings=settings, quotas=quotas_of(cfg))
    return Engine(state=state, scheduler=scheduler,
                  lifecycle=Lifecycle(scheduler, ttl=cfg.scheduling.assume_ttl_seconds),
                  refusals=refusals_of(cfg), shortlist=cfg.scheduling.shortlist)


def _given(settings: msgspec.Struct) -> dict[str, Any]:
    """The fields set in the file, as the engine's keyword arguments (snake_case)."""
    return {f: getattr(settings, f) for f in settings.__struct_fields__ if getattr(settings, f) is not None}
