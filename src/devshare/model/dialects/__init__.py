"""The request dialects, one module each, and the registry every caller asks.

- :mod:`.koordinator`: ``koordinator.sh/gpu*``, ``rdma``, ``fpga`` (and the ``kubernetes.io/`` spellings)
- :mod:`.nvidia`: ``nvidia.com/gpu``
- :mod:`.mgpu`: ``vke.volcengine.com/mgpu-*`` and the ``container-multiple-gpu`` annotation
- :mod:`.aliyun`: ``aliyun.com/gpu-mem`` and ``aliyun.com/gpu-count``
- :mod:`.hami`: ``nvidia.com/gpumem``, ``gpumem-percentage``, ``gpucores`` (with ``nvidia.com/gpu`` as HAMi's count)
- :mod:`.volcano`: Volcano's vGPU (``volcano.sh/vgpu-*``) and gpushare (``volcano.sh/gpu-memory``)
- :mod:`.configured`: the resource names the configuration file gives a new device type
  (``deviceTypes.npu.resources``), registered at start by :func:`configure_types`

Each module holds its dialect's names, reader, rules, annotation codec and webhook renames behind
the :class:`~devshare.model.dialects.base.Dialect` protocol. Adding a dialect is one new module
with a ``Dialect`` subclass and one :func:`register` line below; the pod reader, the annotation
writer, the webhook, the engine and the deploy manifests' tests all go through this registry.
"""

from __future__ import annotations

from typing import Any

from devshare.model import names
from devshare.model.dialects.aliyun import AliyunDialect
from devshare.model.dialects.base import ZERO, Dialect, PlacedGrant, PlacedReading
from devshare.model.dialects.hami import HamiDialect
from devshare.model.dialects.koordinator import KoordinatorDialect
from devshare.model.dialects.mgpu import MgpuDialect
from devshare.model.dialects.nvidia import NvidiaDialect
from devshare.model.dialects.volcano import VolcanoGpushareDialect, VolcanoVgpuDialect

DIALECTS: dict[str, Dialect] = {}
_resource_names: frozenset[str] = frozenset()
_owner: dict[str, Dialect] = {}  # resource name -> the dialect it asks in
_renamers: tuple[Dialect, ...] = ()  # the dialects with webhook renames
_rank: dict[str, int] = {}  # dialect name -> registration order
# annotation keys that say where a pod's devices are: devshare's own and the group topology, then each dialect's
_allocation_keys: frozenset[str] = frozenset({names.ALLOCATION, names.ASSIGNED, names.TOPOLOGY_GPU})
_allocation_prefixes: tuple[str, ...] = ()


def register(dialect: Dialect) -> None:
    """Add a dialect (registration order is the order of :func:`managed_resources`). A resource name
    belongs to one dialect."""
    taken = {n: _owner[n].name for n in dialect.resource_names if n in _owner and _owner[n].name != dialect.name}
    if taken:
        raise ValueError(f"dialect {dialect.name}: resource names already read by another dialect: {taken}")
    DIALECTS[dialect.name] = dialect
    _rebuild()


def unregister(name: str) -> None:
    """Remove the dialect ``name`` (a configured device type's, when the configuration changes)."""
    if DIALECTS.pop(name, None) is not None:
        _rebuild()


def _rebuild() -> None:
    """The lookups derived from DIALECTS (replaced whole, never changed in place)."""
    global _resource_names, _owner, _renamers, _rank, _allocation_keys, _allocation_prefixes
    _resource_names = frozenset(n for d in DIALECTS.values() for n in d.resource_names)
    _owner = {n: d for d in DIALECTS.values() for n in d.resource_names}
    _renamers = tuple(d for d in DIALECTS.values() if d.renamed_names)
    _rank = {name: i for i, name in enumerate(DIALECTS)}
    _allocation_keys = frozenset({names.ALLOCATION, names.ASSIGNED, names.TOPOLOGY_GPU}).union(
        *(d.allocation_annotations for d in DIALECTS.values()))
    _allocation_prefixes = tuple(p for d in DIALECTS.values() for p in d.allocation_prefixes)


def configure_types(types: dict[str, tuple[str, ...]]) -> None:
    """Make the configured device types (``deviceTypes.<type>.resources`` of the configuration
    file) the only configured dialects: each type's resource names ask a percent of one device of
    that type (:mod:`.configured`). Raises ValueError naming a resource name another dialect reads."""
    from devshare.model.dialects.configured import PREFIX, ConfiguredDialect

    for name in [n for n in DIALECTS if n.startswith(PREFIX)]:
        unregister(name)
    added: list[str] = []
    try:
        for device_type, resource_names in types.items():
            d = ConfiguredDialect(device_type, tuple(resource_names))
            register(d)
            added.append(d.name)
    except ValueError:
        for name in added:
            unregister(name)
        raise


SCHEDULE_MODES = ("index", "id")


def configure_schedule_mode(mode: str) -> None:
    """Seed 000's ``MGPUScheduleMode``: dialect annotations that list devices name them by index
    (minor) or by id (UUID). Only dialects whose node side reads either honour it (mGPU)."""
    if mode not in SCHEDULE_MODES:
        raise ValueError(f"unknown schedule mode {mode!r}: use index or id")
    for d in DIALECTS.values():
        d.schedule_mode = mode


def owner_of(resource_name: str) -> Dialect | None:
    """The dialect that reads ``resource_name`` (None: no dialect does)."""
    return _owner.get(resource_name)


def _carries(holder: Dialect, other: Dialect, resources: dict[str, Any] | None) -> bool:
    return holder.carries(other.name, resources) or other.carried_by == holder.name


register(KoordinatorDialect())
register(NvidiaDialect())
register(MgpuDialect())
register(AliyunDialect())
register(HamiDialect())
register(VolcanoVgpuDialect())
register(VolcanoGpushareDialect())

NVIDIA_GPU_DIALECTS = ("nvidia", "hami")
_bare_nvidia = "nvidia"  # whose pods ask nvidia.com/gpu alone: NVIDIA's (whole cards) or HAMi's


def configure_nvidia_gpu(dialect: str) -> None:
    """Whose a pod asking ``nvidia.com/gpu`` without HAMi's companion names is: ``nvidia`` (whole cards,
    Koordinator's annotation: devshare's agent or NVIDIA's device plugin serves the name) or ``hami``
    (the same whole cards, HAMi's annotations: HAMi's device plugin serves the name on the nodes)."""
    global _bare_nvidia
    if dialect not in NVIDIA_GPU_DIALECTS:
        raise ValueError(f"unknown nvidia.com/gpu dialect {dialect!r}: use nvidia or hami")
    _bare_nvidia = dialect


def bare_nvidia_gpu() -> str:
    return _bare_nvidia

DEFAULT = "koordinator"  # the dialect of a pod that asks for no device (PodRequest's default)


def dialect_of(name: str) -> Dialect | None:
    """The registered dialect named ``name`` (a PodRequest's ``dialect``); None when unknown."""
    return DIALECTS.get(name)


def allocation_annotations() -> frozenset[str]:
    """The annotation keys that say where a pod's devices are: devshare's own, the group topology
    and each dialect's (what devshare writes at bind, and the node agent's mark). Only devshare's
    own identities may write them (the validating webhook, devshare.server.webhook.allocations)."""
    return _allocation_keys


def allocation_prefixes() -> tuple[str, ...]:
    """Key prefixes of allocation annotations (mGPU writes one key per container)."""
    return _allocation_prefixes


def is_allocation_annotation(key: str) -> bool:
    return key in _allocation_keys or key.startswith(_allocation_prefixes)


def resource_names() -> frozenset[str]:
    """Every container resource name that asks for a managed device, in any dialect and spelling."""
    return _resource_names


def managed_resources() -> tuple[str, ...]:
    """The extended resource names nodes advertise and kube-scheduler routes to the extender
    (never the ``kubernetes.io/`` spellings: DESIGN.md, facts checked against a real kube-scheduler)."""
    return tuple(n for d in DIALECTS.values() for n in d.managed_resources)


def dialects_in(resources: dict[str, Any]) -> tuple[list[str], list[Dialect]]:
    """The dialects a container's resources ask in, as (the container's dialects, the readers to
    run in order). A dialect another one carries (:meth:`Dialect.carries`) is read, before its
    carrier, but is not the container's. More than one dialect is a problem for the caller."""
    owner = _owner
    found: list[Dialect] = []
    for k, v in resources.items():
        d = owner.get(k)
        if d is not None and d not in found and v not in ZERO:
            found.append(d)
    if len(found) <= 1:
        return [d.name for d in found], found
    # a name another dialect reads as its own beside its names (HAMi's nvidia.com/gpu count)
    found = [d for d in found if not any(h is not d and h.absorbs(d.name, resources) for h in found)]
    if len(found) <= 1:
        return [d.name for d in found], found
    found.sort(key=lambda d: _rank[d.name])
    carried = [d for d in found if any(h is not d and _carries(h, d, resources) for h in found)]
    own = [d for d in found if d not in carried]
    if len(own) > 1:  # several dialects: the problem names every one asked
        return [d.name for d in found], found
    return [d.name for d in own], carried + own


def pod_dialects(container_dialects: list[str]) -> list[str]:
    """The containers' dialects with those another container's dialect carries left out (a bare
    ``nvidia.com/gpu`` pod is HAMi's where the configuration says so: :func:`configure_nvidia_gpu`)."""
    if _bare_nvidia != "nvidia":
        container_dialects = [_bare_nvidia if d == "nvidia" else d for d in container_dialects]
    present = set(container_dialects)
    if len(present) <= 1:
        return container_dialects
    kept = [d for d in container_dialects
            if not any(h != d and h in DIALECTS and d in DIALECTS and _carries(DIALECTS[h], DIALECTS[d], None)
                       for h in present)]
    return kept if len(set(kept)) <= 1 else container_dialects  # several: the problem names every one


def normalise_resources(resources: dict[str, Any]) -> dict[str, Any]:
    """The resource map as the mutating webhook writes it: every dialect's renames, in turn (a
    new dict; the input is not changed; idempotent)."""
    out = dict(resources)
    for d in _renamers:
        if not d.renamed_names.isdisjoint(out):
            out = d.renames(out)
    return out


__all__ = ["DEFAULT", "DIALECTS", "Dialect", "PlacedGrant", "PlacedReading", "bare_nvidia_gpu", "configure_nvidia_gpu",
           "configure_schedule_mode", "configure_types", "dialect_of", "dialects_in", "managed_resources",
           "normalise_resources", "owner_of", "pod_dialects", "register", "resource_names", "unregister"]
