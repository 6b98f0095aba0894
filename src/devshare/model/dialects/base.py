"""The dialect protocol: everything devshare knows about one way of asking for devices.

A dialect is one module of :mod:`devshare.model.dialects` holding, for its resource names:

- the names (constants at the top of its module),
- the reader: a container's resources into :class:`~devshare.model.request.DeviceRequest` values
  (:meth:`Dialect.read`), with pod-level input where the dialect has one (:meth:`Dialect.pod_context`),
- the rules the reader applies (small functions in the module, each returning a message for a person),
- the annotation codec: what a scheduled pod carries for that dialect's node-side components
  (:meth:`Dialect.encode`, and the module's ``decode_*`` function),
- the webhook's renames (:meth:`Dialect.renames`).

The pod reader (:mod:`devshare.model.pod`), the annotation writer (:mod:`devshare.model.annotations`),
the webhook and the engine ask the registry (:mod:`devshare.model.dialects`) and never name a dialect.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from fractions import Fraction
from typing import Any

import msgspec

from devshare.model.allocation import PodAllocation
from devshare.model.errors import InvalidInput
from devshare.model.problems import Problems
from devshare.model.quantity import parse_quantity, shown
from devshare.model.request import MAX_DEVICE_MEMORY, MAX_DEVICES, DeviceRequest, PodRequest

ZERO = ("0", 0)  # a resource asked as zero is not asked (Kubernetes' usual ``resource: 0``)


class PlacedGrant(msgspec.Struct, frozen=True, kw_only=True):
    """One device a pod placed by another scheduler holds, as that scheduler recorded it: not yet
    matched to a card devshare knows (:mod:`devshare.model.peers` does that). An amount that is not
    recorded (None) counts as all of the card."""

    type: str = "gpu"
    container: str = ""  # the container it was given to ("" where the peer records the pod as a whole)
    init: bool = False  # given to an init container (handed on to the app containers: PodAllocation.usage)
    minor: int | None = None  # the card's index, when the peer records one
    id: str = ""  # the card's id (a GPU's UUID), when the peer records one
    core_milli: int | None = None  # thousandths of the card's compute
    memory: int | None = None  # bytes
    memory_ratio_milli: int | None = None  # thousandths of the card's memory
    whole: bool = False  # the whole card


class PlacedReading(msgspec.Struct, frozen=True, kw_only=True):
    """What a pod placed by another scheduler holds, read from that scheduler's own annotations."""

    dialect: str  # whose annotations (a dialect's name)
    node: str | None = None  # the node they name (None where they name none)
    grants: tuple[PlacedGrant, ...] = ()
    problems: tuple[str, ...] = ()  # what could not be read as the peer writes it (the count is conservative)
    # device types whose record could not be read at all: every card of the type on the node counts as held
    unreadable: tuple[str, ...] = ()
    # the pod records nothing; kubelet's checkpoint (the node's Device, seed 001's devices-checkpoints)
    # names its cards when the node agent reports them: then they are counted there, not again
    in_checkpoint: bool = False


class Dialect(ABC):
    """One request dialect. Subclasses set the class attributes and implement :meth:`read`."""

    name: str  # the tag a PodRequest carries (PodRequest.dialect)
    resource_names: frozenset[str]  # every container resource name that asks in it, all spellings
    managed_resources: tuple[str, ...] = ()  # those nodes advertise and kube-scheduler routes to the extender
    renamed_names: frozenset[str] = frozenset()  # the names :meth:`renames` may rewrite (none: no renames)
    # the annotation keys (and key prefixes) :meth:`encode` writes: only devshare may write them
    allocation_annotations: frozenset[str] = frozenset()
    allocation_prefixes: tuple[str, ...] = ()
    # one container spreading a share over several cards needs seed 000's node label and compute policy
    multi_card_share_needs_label: bool = True
    # the dialect whose annotations also carry this one's asks (a configured device type's are
    # Koordinator's): beside it, in one container or one pod, the pod is of that dialect
    carried_by: str | None = None
    # seed 000's MGPUScheduleMode: how this dialect's annotation names devices, "index" (minors) or
    # "id" (UUIDs), for dialects whose node side reads either (mGPU); set by configure_schedule_mode
    schedule_mode: str = "index"
    # whether its node side can give an init container devices (Volcano's vGPU reads app containers only)
    init_containers: bool = True
    # the whole pod's devices on one card (Volcano's gpushare writes one index per pod)
    one_card_per_pod: bool = False

    def carries(self, other: str, resources: dict[str, Any] | None) -> bool:
        """Can this dialect's annotations also carry what dialect ``other`` asks for, beside its
        own: in one container with ``resources``, or (``None``) in other containers of the pod.
        Such a container or pod is read in both dialects and is of this one."""
        return False

    def pod_context(self, annotations: dict[str, str], n_containers: int, problems: Problems) -> Any:
        """Pod-level input of the dialect (read once per pod whose containers ask in it), handed
        to :meth:`read`. None for dialects that read containers alone."""
        return None

    @abstractmethod
    def read(self, resources: dict[str, Any], where: str, problems: Problems, context: Any,
             index: int) -> list[DeviceRequest]:
        """The device requests of container number ``index`` (its merged requests/limits);
        every problem goes to ``problems`` under ``where``."""

    def encode(self, pod: PodRequest, alloc: PodAllocation, *, now_ns: int,
               device_memory: dict[int, int] | None) -> dict[str, str]:
        """The annotations this dialect's node-side components read, for ``alloc``."""
        return {}

    def absorbs(self, other: str, resources: dict[str, Any]) -> bool:
        """Does this dialect read, as its own, what dialect ``other`` asks in one container with
        ``resources`` (HAMi's ``nvidia.com/gpumem`` beside ``nvidia.com/gpu``: the count is HAMi's)?
        Then ``other``'s reader does not run for that container, and the container is of this one."""
        return False

    def read_placed(self, annotations: dict[str, str], spec: dict[str, Any]) -> PlacedReading | None:
        """What a pod this dialect's own scheduler placed holds, from the annotations that scheduler
        writes (taking over a running cluster: DESIGN.md). None when the pod carries none of them.
        Never raises: what cannot be read is a problem of the reading, counted conservatively."""
        return None

    def renames(self, resources: dict[str, Any]) -> dict[str, Any]:
        """The resource map as the mutating webhook rewrites it (idempotent; the map given is the
        caller's own copy, so it may be changed and returned). Called only for a map holding one of
        :attr:`renamed_names`."""
        return resources


# the largest value of a dimension by its unit (see request.MAX_DEVICES)
MAXIMUM = {
    "GPUs": (MAX_DEVICES, f"{MAX_DEVICES} devices"),
    "percent": (MAX_DEVICES * 100, f"{MAX_DEVICES * 100} ({MAX_DEVICES} whole devices)"),
    "bytes": (MAX_DEVICE_MEMORY, "1Pi (1 PiB)"),
    "MiB": (MAX_DEVICE_MEMORY // 2**20, f"{MAX_DEVICE_MEMORY // 2**20} (1 PiB)"),
}


def read_whole(resources: dict[str, Any], name: str, where: str, problems: Problems, unit: str) -> int | None:
    """The whole-number value of resource ``name`` (None when absent or unreadable; a problem is
    recorded when unreadable or above the unit's maximum). ``unit`` names what the number counts,
    for the message."""
    if name not in resources:
        return None
    value = resources[name]
    try:
        q: Fraction = parse_quantity(value)
    except InvalidInput as e:
        problems.add(where, f"{name}: {e.message}")
        return None
    if q.denominator != 1:
        problems.add(where, f"{name} is {float(q):g}; it must be a whole number of {unit}")
        return None
    top = MAXIMUM.get(unit)
    if top is not None and q > top[0]:
        problems.add(where, f"{name} is {shown(value)}, far beyond any device: it must be at most {top[1]}")
        return None
    return int(q)



def spec_containers(spec: Any) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, dict[str, Any]]]]:
    """The pod's init containers and app containers, each as (name, resources: requests over limits),
    for the readers of placed pods (never raises; what is malformed is left out)."""
    out: tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, dict[str, Any]]]] = ([], [])
    if not isinstance(spec, dict):
        return out
    for part, key in enumerate(("initContainers", "containers")):
        items = spec.get(key)
        for i, c in enumerate(items if isinstance(items, list) else []):
            if not isinstance(c, dict):
                continue
            raw_name, raw_res = c.get("name"), c.get("resources")
            name = raw_name if isinstance(raw_name, str) else f"#{i}"
            res: dict[str, Any] = raw_res if isinstance(raw_res, dict) else {}
            merged: dict[str, Any] = {}
            for sub in ("limits", "requests"):
                d = res.get(sub)
                if isinstance(d, dict):
                    merged.update({str(k): v for k, v in d.items()})
            out[part].append((name, merged))
    return out


def restartable_init(spec: Any) -> frozenset[str]:
    """Names of the pod's restartable init containers (``restartPolicy: Always``, "sidecars"): they
    keep running beside the app containers and keep their devices (kubelet's devicemanager)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("initContainers"), list):
        return frozenset()
    return frozenset(str(c.get("name")) for c in spec["initContainers"]
                     if isinstance(c, dict) and c.get("restartPolicy") == "Always")


def whole_quantity(value: Any) -> int | None:
    """A resource value as a whole number (None when it is not one)."""
    try:
        q = parse_quantity(value)
    except InvalidInput:
        return None
    return int(q) if q.denominator == 1 else None
