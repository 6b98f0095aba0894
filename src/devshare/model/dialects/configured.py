"""Device types known from the configuration file alone (``deviceTypes.<type>.resources``).

A type such as ``npu`` has Device objects (the node agent, or a vendor's reporter, lists its devices
with ``type: npu``) but no dialect module: the configuration names the resource names pods ask for
it with, and each becomes a dialect of this module, read like Koordinator's ``rdma`` and ``fpga``:

- ``<name>: P`` is P percent of one device (a share, placed by card-level binpack or spread); above
  100, P / 100 whole devices (P a multiple of 100); 0 means "not asked".

Its pods carry Koordinator's ``scheduling.koordinator.sh/device-allocated`` annotation (Koordinator
records every device type in it: ``{"npu": [{"minor": 0, "resources": {"koordinator.sh/npu": "50"}}]}``)
and the canonical ``devshare.io/allocation`` (``type``, ``minor``, ``id``, ``core`` as the share), and
a container may ask for it beside Koordinator's GPU, RDMA or FPGA names (the Koordinator dialect
carries it). Registered at start by :meth:`devshare.config.Configuration.register` through
:func:`devshare.model.dialects.configure_types`.
"""

from __future__ import annotations

from typing import Any

from devshare.model.allocation import PodAllocation
from devshare.model.dialects.base import Dialect, read_whole
from devshare.model.dialects.koordinator_annotation import encode_koordinator
from devshare.model.dialects.koordinator_names import KOORD_DEVICE_ALLOCATED
from devshare.model.dialects.koordinator_rules import devices_for, percent_value
from devshare.model.problems import Problems
from devshare.model.request import WHOLE, DeviceRequest, PodRequest

PREFIX = "type:"  # a configured dialect's name is PREFIX + its device type


def dialect_name(device_type: str) -> str:
    return PREFIX + device_type


class ConfiguredDialect(Dialect):
    """The resource names of one configured device type, each asking a percent of one device."""

    allocation_annotations = frozenset({KOORD_DEVICE_ALLOCATED})
    multi_card_share_needs_label = False
    carried_by = "koordinator"  # one container may ask for it beside Koordinator's names

    def __init__(self, device_type: str, resource_names: tuple[str, ...]) -> None:
        self.device_type = device_type
        self.name = dialect_name(device_type)
        self.names = resource_names
        self.resource_names = frozenset(resource_names)
        self.managed_resources = resource_names

    def read(self, resources: dict[str, Any], where: str, problems: Problems, context: Any,
             index: int) -> list[DeviceRequest]:
        asked = [(n, resources[n]) for n in self.names if n in resources and resources[n] not in ("0", 0)]
        if len(asked) > 1:
            problems.add(where, f"{' and '.join(n for n, _ in asked)} all ask for {self.device_type}: keep one of them")
            return []
        if not asked:
            return []
        name = asked[0][0]
        value = read_whole(resources, name, where, problems, "percent")
        if value is None:
            return []
        msg = percent_value(name, value)
        if msg:
            problems.add(where, msg)
            return []
        if value == 0:
            return []
        n = devices_for(value)
        return [DeviceRequest(type=self.device_type, count=n, core_milli=WHOLE if n > 1 else value * 10)]

    def encode(self, pod: PodRequest, alloc: PodAllocation, *, now_ns: int,
               device_memory: dict[int, int] | None) -> dict[str, str]:
        return encode_koordinator(alloc) if alloc.grants() else {}
