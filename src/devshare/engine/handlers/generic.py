"""RDMA, FPGA and any other device shared by percent of one device (seed 001)."""

from __future__ import annotations

from devshare.engine.handlers.base import Context
from devshare.engine.handlers.share import ShareHandler
from devshare.engine.policies.base import Policy
from devshare.engine.policies.binpack import binpack_for
from devshare.model.request import DeviceRequest


class GenericHandler(ShareHandler):
    """Shares of a device with no memory dimension, placed by card-level binpack (or spread)."""

    def policy_for(self, ctx: Context, req: DeviceRequest) -> Policy:
        return binpack_for(ctx.settings, core_weight=1.0)
