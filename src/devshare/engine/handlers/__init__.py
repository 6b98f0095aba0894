"""One handler per shareable device type (seed 004), and the registry that lists them.

Adding a device type is one new module with a :class:`DeviceHandler` subclass and one line below.
"""

from __future__ import annotations

from devshare.engine.handlers.base import Code, DeviceHandler, Evaluation
from devshare.engine.handlers.generic import GenericHandler
from devshare.engine.handlers.gpu import GpuHandler


class Handlers(dict[str, DeviceHandler]):
    """Device type -> its handler; a type nobody registered gets a generic share handler, made (and
    kept) on first use. The scheduler reads it by type: ``HANDLERS[device_type]``."""

    def __missing__(self, device_type: str) -> DeviceHandler:
        h = self[device_type] = GenericHandler(device_type)
        return h


HANDLERS = Handlers()


def register(handler: DeviceHandler) -> None:
    HANDLERS[handler.type] = handler


register(GpuHandler())
register(GenericHandler("rdma"))
register(GenericHandler("fpga"))


__all__ = ["HANDLERS", "Code", "DeviceHandler", "Evaluation", "register"]
