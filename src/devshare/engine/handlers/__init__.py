"""One handler per shareable device type (seed 004), and the registry that lists them.

Adding a device type is one new module with a :class:`DeviceHandler` subclass and one line below.
"""

from __future__ import annotations

from devshare.engine.handlers.base import Code, DeviceHandler, Evaluation
from devshare.engine.handlers.generic import GenericHandler
from devshare.engine.handlers.gpu import GpuHandler

HANDLERS: dict[str, DeviceHandler] = {}


def register(handler: DeviceHandler) -> None:
    HANDLERS[handler.type] = handler


register(GpuHandler())
register(GenericHandler("rdma"))
register(GenericHandler("fpga"))


def handler_for(device_type: str) -> DeviceHandler:
    """The handler of a device type; unknown types get a generic share handler."""
    h = HANDLERS.get(device_type)
    if h is None:
        h = GenericHandler(device_type)
        HANDLERS[device_type] = h
    return h


__all__ = ["HANDLERS", "Code", "DeviceHandler", "Evaluation", "handler_for", "register"]
