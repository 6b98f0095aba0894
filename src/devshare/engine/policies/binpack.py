"""Seed 000's card-level and node-level binpack/spread, the policy of every pod shape a learning
policy does not score (and ``--policy binpack|spread``)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numpy as np

from devshare.engine.fit import FitView, card_scores, pick_columns
from devshare.engine.policies.base import Choice, StatelessPolicy, node_utilization
from devshare.model.request import DeviceRequest, PodRequest


class BinpackPolicy(StatelessPolicy):
    """Seed 000: card-level binpack or spread (``w x core-score + (1 - w) x memory-score``),
    combined with node-level binpack or spread. Aliyun's bind rule (the fitting card with the least
    free memory) is card binpack with memory-only requests."""

    def __init__(self, *, card_binpack: bool = True, node_binpack: bool = True, core_weight: float = 0.5,
                 card_weight: float = 0.5) -> None:
        self.name = "binpack" if card_binpack else "spread"
        self.row_local = True
        self.model_version = 0
        self.card_binpack = card_binpack
        self.node_binpack = node_binpack
        self.core_weight = core_weight
        self.card_weight = card_weight

    def choose(self, view: FitView) -> Choice:
        m = len(view.rows)
        if view.table is None or view.request is None or view.count == 0:
            return Choice(np.zeros(m, np.float64), np.zeros((m, 0), np.int64))
        req = view.request
        g = view.arrays()
        if req.whole:
            # every free device scores the same once taken whole: the lowest-numbered ones
            cols = np.asarray(np.argsort(~view.fits, axis=1, kind="stable")[:, : req.count], np.int64)
            card = np.full(m, 1.0 if self.card_binpack else 0.0)
        else:
            cs = card_scores(g, req, self.core_weight, self.card_binpack)
            cols = pick_columns(view.fits, cs, req.count)
            card = np.take_along_axis(cs, cols, axis=1).mean(axis=1)
        util = node_utilization(g, req.core_milli * req.count)
        node = util if self.node_binpack else 1.0 - util
        scores = self.card_weight * card + (1.0 - self.card_weight) * node
        return Choice(np.asarray(scores, np.float64), cols)

    def cache_key(self, pod: PodRequest, request: DeviceRequest) -> Hashable:
        """:meth:`choose` reads the per-device ask and the node's arrays, nothing else of the pod."""
        return request


_BINPACK: dict[tuple[bool, bool, float], BinpackPolicy] = {}


def binpack_for(settings: Any, *, core_weight: float) -> BinpackPolicy:
    """The shared binpack/spread policy for these settings (one object each, so its answers cache)."""
    key = (bool(settings.card_binpack), bool(settings.node_binpack), float(core_weight))
    p = _BINPACK.get(key)
    if p is None:
        p = _BINPACK[key] = BinpackPolicy(card_binpack=key[0], node_binpack=key[1], core_weight=key[2])
    return p
