"""A pod's record in the cluster state: what it holds (its allocation), whether assumed or bound, and
what for. The records are kept by :class:`devshare.engine.state.ClusterState` and changed by the one
cache alone (:mod:`devshare.engine.lifecycle`)."""

from __future__ import annotations

from typing import Literal

import msgspec

from devshare.model.allocation import PodAllocation
from devshare.model.request import PodRequest

Phase = Literal["assumed", "bound"]
# what an assumed record holds devices for: a bind (in flight, or about to be sent), a filter's answer
# waiting for its bind (a shortlist of one), a group plan (a member's planned devices, or a placeholder
# for a member to come)
Hold = Literal["bind", "filter", "group"]


class Conflict(Exception):
    """An allocation that no longer fits (another pod took the device first)."""


class PodRecord(msgspec.Struct, kw_only=True):
    pod: PodRequest
    allocation: PodAllocation
    phase: Phase
    expires_at: float | None = None
    hold: Hold = "bind"  # what an assumed record is held for
    group: str | None = None  # a group plan's placeholder (the group key): devices kept for a member to come
    # placed by another scheduler (taking over a running cluster): whose annotations it was read from,
    # and what of it is counted conservatively (a card as full), for the log and /inspect
    peer: str | None = None
    problems: tuple[str, ...] = ()
