"""RDMA, FPGA and any other device shared by percent of one device (seed 001)."""

from __future__ import annotations

from devshare.engine.handlers.base import Context
from devshare.engine.handlers.share import ShareHandler
from devshare.engine.policy import BinpackPolicy, Choice, FitView


class GenericHandler(ShareHandler):
    """Shares of a device with no memory dimension, placed by card-level binpack (or spread)."""

    def choose(self, ctx: Context, view: FitView) -> Choice:
        s = ctx.settings
        return BinpackPolicy(card_binpack=s.card_binpack, node_binpack=s.node_binpack, core_weight=1.0).choose(view)
