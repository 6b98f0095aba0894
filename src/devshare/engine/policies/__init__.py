"""Node policies the engine can score with (the FGD paper's six, seed 000's binpack/spread and
devshare's own default), one module each, and the protocol they follow (:mod:`.base`).

``make_policy(name, seed=..., classes=..., settings=..., card_binpack=..., options=...)`` builds one
by name: the one factory of policies (the simulator's, the extender's, ``devshare schedule``'s and
the configuration file's, :meth:`devshare.config.Configuration.policy`). ``classes`` is FGD's task-class
table (from the original trace); the others ignore it. The devshare policy learns online instead.
``binpack`` and ``spread`` are seed 000's card and node binpack/spread (``settings.core_weight``).
The live scheduler (extender, ``devshare schedule``) offers :data:`LIVE_NAMES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from devshare.engine.fit import FitView
from devshare.engine.handlers.base import Settings
from devshare.engine.policies.base import Choice, Policy, StatelessPolicy
from devshare.engine.policies.binpack import BinpackPolicy
from devshare.engine.policies.classic import (
    BestFitPolicy,
    DotProdPolicy,
    GpuClusteringPolicy,
    GpuPackingPolicy,
    RandomPolicy,
)
from devshare.engine.policies.fgd import ClassKey, FGDPolicy, FragModel, top_classes
from devshare.model.errors import InvalidInput

NAMES = ("random", "dotprod", "clustering", "packing", "bestfit", "fgd", "devshare")
LIVE_NAMES = ("devshare", "binpack", "spread")  # what the extender and devshare schedule offer
DRA_BASELINE = "dra-baseline"  # kube-scheduler's own DRA allocation, for comparison (simulate --dra-baseline)


def make_policy(name: str, *, seed: int = 0, classes: Mapping[ClassKey, float] | None = None,
                settings: Settings | None = None, card_binpack: bool | None = None,
                options: Mapping[str, Any] | None = None) -> Policy:
    """The policy named ``name``. ``settings``: the engine's (binpack/spread read ``core_weight``);
    ``card_binpack``: seed 000's card level when the configuration file's ``cardPolicy`` sets it
    (binpack/spread: instead of the name's; devshare: its cards are chosen so instead of by expected
    fragmentation, :mod:`.cards`); ``options``: the policy's own knobs (the file's ``policies.<name>``)."""
    opts = dict(options or {})
    if opts and name not in ("binpack", "spread", "devshare"):
        raise InvalidInput(f"the {name} policy takes no options (got {', '.join(sorted(opts))})", field="policy")
    if name in ("binpack", "spread"):
        s = settings or Settings()
        card = name == "binpack" if card_binpack is None else card_binpack
        return BinpackPolicy(card_binpack=card, node_binpack=name == "binpack", core_weight=s.core_weight, **opts)
    if name == "random":
        return RandomPolicy(seed)
    if name == "dra-baseline":  # kube-scheduler's own DRA allocation (issue 38)
        from devshare.engine.policies.firstfit import DraBaselinePolicy

        return DraBaselinePolicy(seed)
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

        policy: Policy = DevsharePolicy(**opts)
        if card_binpack is None:
            return policy  # its own cards: by expected fragmentation
        from devshare.engine.policies.cards import CardPolicy

        s = settings or Settings()
        return CardPolicy(policy, BinpackPolicy(card_binpack=card_binpack, core_weight=s.core_weight))
    known = ", ".join((*NAMES, *LIVE_NAMES[1:], DRA_BASELINE))
    raise InvalidInput(f"unknown policy {name!r}; choose from {known}",
                       field="policy")


__all__ = ["LIVE_NAMES", "NAMES", "BestFitPolicy", "BinpackPolicy", "Choice", "ClassKey", "DotProdPolicy",
           "FGDPolicy", "FitView", "FragModel", "GpuClusteringPolicy", "GpuPackingPolicy", "Policy", "RandomPolicy",
           "StatelessPolicy", "make_policy", "top_classes"]
