"""Node policies the engine can score with (the FGD paper's six, and devshare's own default).

``make_policy(name, seed=..., classes=..., settings=...)`` builds one by name: the one factory of
policies (the simulator's, the extender's, ``devshare schedule``'s). ``classes`` is FGD's task-class
table (from the original trace); the others ignore it. The devshare policy learns online instead.
``binpack`` and ``spread`` are seed 000's card and node binpack/spread (``settings.core_weight``).
The live scheduler (extender, ``devshare schedule``) offers :data:`LIVE_NAMES`.
"""

from __future__ import annotations

from collections.abc import Mapping

from devshare.engine.handlers.base import Settings
from devshare.engine.policies.classic import (
    BestFitPolicy,
    DotProdPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
    RandomPolicy,
)
from devshare.engine.policies.fgd import FGDPolicy
from devshare.engine.policies.frag import ClassKey, FragModel, top_classes
from devshare.engine.policy import BinpackPolicy, Policy
from devshare.model.errors import InvalidInput

NAMES = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", "devshare")
LIVE_NAMES = ("devshare", "binpack", "spread")  # what the extender and devshare schedule offer


def make_policy(name: str, *, seed: int = 0, classes: Mapping[ClassKey, float] | None = None,
                settings: Settings | None = None) -> Policy:
    if name in ("binpack", "spread"):
        s = settings or Settings()
        return BinpackPolicy(card_binpack=name == "binpack", node_binpack=name == "binpack",
                             core_weight=s.core_weight)
    if name == "random":
        return RandomPolicy(seed)
    if name == "dotprod":
        return DotProdPolicy()
    if name == "clustering":
        return GpuClusteringPolicy()
    if name == "packing":
        return GpuPackingPolicy()
    if name == "bestfit":
        return BestFitPolicy()
    if name == "fgd":
        if classes is None:
            raise InvalidInput("the fgd policy needs the trace's task classes", field="policy")
        return FGDPolicy(classes)
    if name == "devshare":
        from devshare.engine.policies.devshare import DevsharePolicy

        return DevsharePolicy()
    raise InvalidInput(f"unknown policy {name!r}; choose from {', '.join((*NAMES, *LIVE_NAMES[1:]))}",
                       field="policy")


__all__ = ["LIVE_NAMES", "NAMES", "BestFitPolicy", "ClassKey", "DotProdPolicy", "FGDPolicy", "FragModel",
           "GpuClusteringPolicy", "GpuPackingPolicy", "RandomPolicy", "make_policy", "top_classes"]
