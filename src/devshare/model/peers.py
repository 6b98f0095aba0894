"""Pods another scheduler placed: what they hold, read from that scheduler's own annotations and
matched to the cards devshare knows (taking over a running cluster, DESIGN.md).

Each dialect reads the annotations its own scheduler writes (:meth:`Dialect.read_placed`: Koordinator's
``device-allocated``, HAMi's ``hami.io/vgpu-devices-allocated``, Volcano's vGPU and gpushare
annotations, mGPU's ``gpu-index-container-*``, Aliyun's ``ALIYUN_COM_GPU_MEM_*``); this module matches
what they name to the node's devices (:class:`~devshare.model.device.NodeDevices`) and turns it into an
allocation the engine counts like any other. What cannot be matched or read is never dropped: it is
counted conservatively, the card as full:

- a card devshare does not know (an id or minor the node's inventory lacks): every card of that type
  on the node counts as held by the pod, until the inventory names it;
- an amount beyond the card (more compute or memory than it has), not recorded, or not readable:
  the card counts as full;
- a record that cannot be read at all: every card of its type on the node counts as held;
- no record at all, for a pod asking ``nvidia.com/gpu`` (kube-scheduler and NVIDIA's device plugin
  placed it): its cards are those kubelet's checkpoint names for it, when the node's Device reports
  them (by pod UID); until then every GPU of its node counts as held.

Each such case is a problem of the reading (a sentence naming the pod's annotation), which the
caller logs and shows in ``/inspect``. Several peers' records on one pod (Koordinator's and HAMi's,
where one drives the other's node side) are merged per card by the larger amount.
"""

from __future__ import annotations

from typing import Any

import msgspec

from devshare.model import dialects, names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.device import DeviceInfo, NodeDevices
from devshare.model.dialects.base import PlacedGrant, PlacedReading
from devshare.model.request import WHOLE

POD = "(pod)"  # the container name of what a peer records for the pod as a whole (Koordinator, Aliyun)


class PeerAllocation(msgspec.Struct, frozen=True, kw_only=True):
    """A pod another scheduler placed, as devshare counts it."""

    dialect: str  # whose annotations (several: joined with "+")
    allocation: PodAllocation
    problems: tuple[str, ...] = ()  # what was counted conservatively, and why
    waiting: bool = False  # the node's devices are not known yet: read it again when they are


def readings(pod: Any) -> list[PlacedReading]:
    """Every dialect's reading of ``pod`` (a v1 Pod dict); empty when no peer placed it. Never raises."""
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(pod, dict):
        return []
    ann = {str(k): v if isinstance(v, str) else str(v) for k, v in annotations.items()} \
        if isinstance(annotations, dict) else {}
    raw_spec = pod.get("spec")
    spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
    out = []
    for d in dialects.DIALECTS.values():
        try:
            r = d.read_placed(ann, spec)
        except Exception as e:  # a reader's bug must not drop the pod: all of its cards are held
            r = PlacedReading(dialect=d.name, unreadable=(names.GPU,),
                              problems=(f"its {d.name} annotations could not be read ({type(e).__name__}: {e})",))
        if r is not None:
            out.append(r)
    if len(out) > 1:  # a scheduler recorded its cards: kubelet's checkpoint is not needed to know them
        out = [r for r in out if not r.in_checkpoint]
    return out


def _card(g: PlacedGrant, cards: tuple[DeviceInfo, ...]) -> DeviceInfo | None:
    if g.id:
        return next((c for c in cards if c.id == g.id), None)
    return next((c for c in cards if c.minor == g.minor), None)


def _full(card: DeviceInfo) -> DeviceGrant:
    return DeviceGrant(type=card.type, minor=card.minor, id=card.id, core_milli=card.core_milli, memory=card.memory,
                       memory_ratio_milli=WHOLE if card.memory else 0)


def _amounts(g: PlacedGrant, card: DeviceInfo, what: str) -> tuple[DeviceGrant, str | None]:
    """The grant on ``card``, or the card as full and why."""
    if g.whole:
        return _full(card), None
    gpu = card.type == names.GPU
    core = g.core_milli
    if g.memory is not None:
        memory = g.memory
    elif g.memory_ratio_milli is not None:
        if g.memory_ratio_milli > WHOLE:
            return _full(card), f"{what}: {g.memory_ratio_milli / 10:g}% of the memory of {card.type} {card.minor}, " \
                                "more than all of it: counted as full"
        memory = card.memory * g.memory_ratio_milli // WHOLE
    else:
        memory = card.memory if gpu else 0
    if core is None:
        return _full(card), f"{what}: no compute recorded on {card.type} {card.minor}: counted as full"
    if core > card.core_milli or memory > card.memory:
        return _full(card), (f"{what}: {core / 10:g}% compute and {memory / 2**30:.1f} GiB on {card.type} "
                             f"{card.minor}, more than it has ({card.core_milli / 10:g}%, "
                             f"{card.memory / 2**30:.1f} GiB): counted as full")
    ratio = memory * WHOLE // card.memory if card.memory else 0
    return DeviceGrant(type=card.type, minor=card.minor, id=card.id, core_milli=core, memory=memory,
                       memory_ratio_milli=ratio), None


def _resolve_one(r: PlacedReading, node: str, nd: NodeDevices) -> tuple[PodAllocation, list[str]]:
    problems = list(r.problems)
    containers: dict[tuple[str, bool], list[DeviceGrant]] = {}
    held_all: set[str] = set(r.unreadable)
    for g in r.grants:
        cards = nd.of_type(g.type)
        card = _card(g, cards)
        what = f"{g.type} {g.id or g.minor}" + (f" of container {g.container!r}" if g.container else "")
        if card is None:
            problems.append(f"{what} is not a device devshare knows on node {node}: every {g.type} of the node is "
                            "counted as held until its inventory names it")
            held_all.add(g.type)
            continue
        grant, msg = _amounts(g, card, what)
        if msg:
            problems.append(msg)
        containers.setdefault((g.container or POD, g.init), []).append(grant)
    for dtype in sorted(held_all):
        containers[(POD, False)] = [gr for gr in containers.get((POD, False), []) if gr.type != dtype] + [
            _full(c) for c in nd.of_type(dtype)]
    alloc = PodAllocation(node=node, containers=tuple(
        ContainerAllocation(name=name, devices=tuple(grants), init=init)
        for (name, init), grants in containers.items()))
    return alloc, problems


def _merge(node: str, allocs: list[PodAllocation]) -> PodAllocation:
    """Several records of one pod: per card, the larger amount (they describe the same devices)."""
    best: dict[tuple[str, int], DeviceGrant] = {}
    for a in allocs:
        for u in a.usage():
            key = (u.type, u.minor)
            old = best.get(key)
            best[key] = DeviceGrant(type=u.type, minor=u.minor, id=u.id,
                                    core_milli=max(u.core_milli, old.core_milli if old else 0),
                                    memory=max(u.memory, old.memory if old else 0),
                                    memory_ratio_milli=max(u.memory_ratio_milli, old.memory_ratio_milli if old else 0))
    return PodAllocation(node=node, containers=(ContainerAllocation(name=POD, devices=tuple(best.values())),))


def resolve(found: list[PlacedReading], node: str, devices: NodeDevices | None,
            uid: str = "") -> PeerAllocation | None:
    """What a pod bound to ``node`` holds, from its peers' ``found`` readings, on the node's ``devices``
    (None: not known yet, the reading waits). None when no peer placed it. ``uid``: the pod's, for a
    pod whose cards only kubelet's checkpoint names."""
    if not found:
        return None
    if devices is not None and uid and all(r.in_checkpoint for r in found) and uid in devices.held_pods:
        # its cards are held outside devshare already, by the checkpoint the node's agent reported
        return PeerAllocation(dialect=found[0].dialect, allocation=PodAllocation(node=node))
    dialect = "+".join(r.dialect for r in found)
    problems: list[str] = []
    for r in found:
        if r.node and r.node != node:
            problems.append(f"its {r.dialect} annotations name node {r.node}, but it is bound to {node}: counted on "
                            f"{node}")
    if devices is None:
        return PeerAllocation(dialect=dialect, allocation=PodAllocation(node=node), waiting=True,
                              problems=(*problems, f"node {node} has no inventory yet: counted once it has"))
    allocs = []
    for r in found:
        alloc, msgs = _resolve_one(r, node, devices)
        allocs.append(alloc)
        problems += msgs
    alloc = allocs[0] if len(allocs) == 1 else _merge(node, allocs)
    return PeerAllocation(dialect=dialect, allocation=alloc, problems=tuple(problems))


def read(pod: Any, node: str, devices: NodeDevices | None) -> PeerAllocation | None:
    """:func:`resolve` of :func:`readings` of ``pod``."""
    meta = pod.get("metadata") if isinstance(pod, dict) else None
    uid = str(meta.get("uid") or "") if isinstance(meta, dict) else ""
    return resolve(readings(pod), node, devices, uid)
