"""What the configuration refuses of a pod before any node is looked at: the one place of these rules.

- a device type the configuration switches off (``deviceTypes.<type>: false``, seed 004's per-type
  switches): :func:`refuse_disabled`, on the parsed request;
- a dialect it switches off (``dialects.<name>: false``; ``mgpu`` is seed 000's ``MGPUEnable``):
  :func:`refuse_dialects`, on the pod's resource names;
- a device type some Device object lists but that no dialect reads (placed, the pod would reserve
  nothing): :func:`refuse_unconfigured`.

The extender's filter, ``devshare schedule`` and the webhook all ask :class:`Refusals` (the webhook
each rule apart, to classify its answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from devshare.model import dialects
from devshare.model.podresources import asked_resource_names, unread_device_asks
from devshare.model.request import PodRequest


def refuse_dialects(pod: Any, disabled: frozenset[str]) -> str | None:
    """Why ``pod`` (a v1 Pod dict) is refused for asking in a dialect the configuration disables; None
    when it does not."""
    if not disabled:
        return None
    off = [(n, d.name) for n in asked_resource_names(pod) if (d := dialects.owner_of(n)) is not None
           and d.name in disabled]
    if not off:
        return None
    what = ", ".join(n for n, _ in off)
    which = sorted({d for _, d in off})
    seed = " (seed 000's MGPUEnable: false)" if "mgpu" in which else ""
    return (f"asks for {what} in the {', '.join(which)} dialect, which devshare's configuration disables "
            f"(dialects.{which[0]}: false{seed}): ask in an enabled dialect, or enable it")


def refuse_disabled(device_types: list[str], disabled: frozenset[str]) -> str | None:
    """Why a pod asking for these device types is refused, or None."""
    off = sorted(set(device_types) & disabled)
    if not off:
        return None
    return (f"asks for {', '.join(off)}, which devshare's configuration disables "
            f"(deviceTypes.{off[0]}: false): remove the request or enable the type")


def refuse_unconfigured(pod: Any, device_types: frozenset[str] | None) -> str | None:
    """Why ``pod`` (a v1 Pod dict) is refused for asking a device type some Device object lists
    (``device_types``) but no dialect reads (None when it asks for none)."""
    asks = unread_device_asks(pod, device_types or frozenset())
    if not asks:
        return None
    name, dtype = asks[0]
    listed = ", ".join(n for n, _ in asks)
    return (f"asks for {listed}, which no dialect of devshare reads: nodes list {dtype} devices, but devshare's "
            f"configuration gives {dtype} no resource names, so the pod would be placed without reserving any. "
            f"Configure the type (deviceTypes: {{{dtype}: {{resources: [{name}]}}}}, docs/configuration.md) or "
            "remove the request")


@dataclass(frozen=True)
class Refusals:
    """The configuration's refusals: ``disabled_types`` (deviceTypes switched off) and
    ``disabled_dialects`` (dialects switched off)."""

    disabled_types: frozenset[str] = frozenset()
    disabled_dialects: frozenset[str] = frozenset()

    def of_pod(self, pod: Any, device_types: frozenset[str] | None) -> str | None:
        """What is refused of a v1 Pod dict before it is parsed: a disabled dialect, a type of
        ``device_types`` (those Device objects list) no dialect reads."""
        return refuse_dialects(pod, self.disabled_dialects) or refuse_unconfigured(pod, device_types)

    def of_request(self, request: PodRequest) -> str | None:
        """What is refused of a parsed request: a disabled device type."""
        if not self.disabled_types:
            return None
        return refuse_disabled([d.type for c in request.containers for d in c.devices], self.disabled_types)
