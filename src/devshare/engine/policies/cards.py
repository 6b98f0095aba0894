"""Seed 000's card-level binpack or spread under any node policy (``MGPUPolicy`` for cards, the
configuration file's ``scheduling.cardPolicy``): the node policy scores the nodes, and on each node the
cards of a share are the card policy's. Whole cards are the node policy's own (every free card
scores the same once taken whole)."""

from __future__ import annotations

from collections.abc import Hashable

from devshare.engine.caches import policy_key
from devshare.engine.fit import FitView
from devshare.engine.policies.base import Choice, Policy
from devshare.engine.policies.binpack import BinpackPolicy
from devshare.model.request import DeviceRequest, PodRequest


class CardPolicy:
    """``inner``'s node scores with ``cards``' choice of cards."""

    def __init__(self, inner: Policy, cards: BinpackPolicy) -> None:
        self.inner = inner
        self.cards = cards
        self.name = f"{inner.name} ({'binpack' if cards.card_binpack else 'spread'} cards)"

    @property
    def row_local(self) -> bool:
        return bool(getattr(self.inner, "row_local", False))

    @property
    def model_version(self) -> int:
        return int(getattr(self.inner, "model_version", 0))

    def observe(self, pod: PodRequest) -> None:
        self.inner.observe(pod)

    def placed(self, pod: PodRequest, row: int) -> None:
        self.inner.placed(pod, row)

    def choose(self, view: FitView) -> Choice:
        choice = self.inner.choose(view)
        if view.request is None or view.request.whole or not view.count:
            return choice
        return Choice(choice.scores, self.cards.choose(view).columns)

    def cache_key(self, pod: PodRequest, request: DeviceRequest) -> Hashable | None:
        inner = policy_key(self.inner, pod, request)
        return None if inner is None else (inner, self.cards.card_binpack, self.cards.core_weight)
