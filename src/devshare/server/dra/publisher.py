"""ResourceSlices the DRA controller publishes for nodes whose Device object no devshare agent
publishes a slice for (Device objects written by another reporter); the agent's own slices are
never touched, and a controller-published slice whose node no longer has a Device object is deleted."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from devshare.kube.dra import DraApi
from devshare.kube.errors import BackendError
from devshare.model import dra, draslices
from devshare.model.device import NodeDevices
from devshare.model.kubeobjects import meta

log = logging.getLogger("devshare.server.dra.controller")


async def publish(api: DraApi, slices: dict[str, dict[str, Any]], devices: Mapping[str, NodeDevices]) -> None:
    """Bring the controller's slices in line with ``devices``; ``slices`` (name -> slice as last seen)
    is updated with what was written."""
    by_agent = {meta(s).get("name") for s in slices.values()
                if ((meta(s).get("labels") or {}).get(dra.PUBLISHED_BY) == "agent")}
    wanted: dict[str, dict[str, Any]] = {}
    for node, nd in devices.items():
        if draslices.slice_name(node) in by_agent:
            continue
        wanted[draslices.slice_name(node)] = draslices.slice_object(nd, published_by="controller")
    for name, obj in wanted.items():
        current = slices.get(name)
        try:
            if current is None:
                slices[name] = await api.create("resourceslices", obj)
            elif draslices.slice_changed(current, obj):
                slices[name] = await api.update("resourceslices", draslices.next_slice(current, obj))
        except BackendError as e:
            log.warning("publishing ResourceSlice %s failed: %s", name, e)
    for name, obj in list(slices.items()):
        labels = meta(obj).get("labels") or {}
        if labels.get(dra.PUBLISHED_BY) == "controller" and name not in wanted:
            with contextlib.suppress(BackendError):
                await api.delete("resourceslices", None, name)
