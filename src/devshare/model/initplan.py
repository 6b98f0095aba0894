"""Init containers that ask for devices, as kubelet gives them.

kubelet's device manager (kubernetes/kubernetes ``pkg/kubelet/cm/devicemanager/manager.go``,
``Allocate`` with ``devicesToReuse``, and ``devicesToAllocate``) admits a pod's init containers first,
one after another, then its app containers; each container takes its devices from the pod's
*reusable* ones first, then from free ones. A (non-restartable) init container's devices become
reusable when it is done; an app container's, or a restartable ("sidecar") init container's, are
taken out of the reusable set: it keeps them. So an init container's devices are handed on to the
containers that follow, and the pod holds, per device, the larger of what one init container and
what everything running beside the app containers holds: its need is max(largest init container,
app containers together), as HAMi (``CollapseInitContainerUsage``), Koordinator (pod requests) and
Volcano's gpushare (``getGPUMemoryOfPod``) count it.

devshare places a pod with such init containers in one of three ways (:func:`plan`), all giving
every container the devices kubelet would:

1. every init container fits inside one app container's devices (as many cards, at most the share
   on each): the app containers (and sidecars) are placed; each init container takes the first cards
   of that app container, with its own share on them (no extra devices);
2. else, one init container covers all the app containers together and every other init container:
   that init container (and the sidecars) is placed, and the others take its cards;
3. else, the app containers, the sidecars and the init containers no app container covers are all
   placed, each on devices of its own (the pod holds their sum: never less than it needs).

Amounts compare only in one unit (bytes with bytes, a ratio with a ratio), or against a whole card.
"""

from __future__ import annotations

import msgspec

from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.request import WHOLE, ContainerRequest, DeviceRequest, PodRequest


class InitPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What the scheduler places for a pod, and which containers take their devices from another's."""

    placed: tuple[ContainerRequest, ...]
    hosted: tuple[tuple[str, str], ...] = ()  # (container, the placed container whose cards it takes)
    together: tuple[str, ...] = ()  # hosted containers that run at the same time (the apps under an init)


def _fits(cap: list[int], guest: DeviceRequest, host: DeviceRequest) -> bool:
    """Whether the guest's share fits what is left of one of the host's cards (``cap``: core, bytes, ratio)."""
    if guest.core_milli > cap[0]:
        return False
    if host.whole:
        return guest.memory <= cap[1] if guest.memory and not guest.memory_ratio_milli else \
            guest.memory_ratio_milli <= cap[2]
    if guest.memory_ratio_milli:
        return bool(host.memory_ratio_milli) and guest.memory_ratio_milli <= cap[2]
    if guest.memory:
        return bool(host.memory) and not host.memory_ratio_milli and guest.memory <= cap[1]
    return True


def _cap(host: DeviceRequest) -> list[int]:
    if host.whole:
        return [WHOLE, 2**62, WHOLE]
    return [host.core_milli, host.memory, host.memory_ratio_milli]


def _take(cap: list[int], guest: DeviceRequest, host: DeviceRequest) -> None:
    cap[0] -= guest.core_milli
    if guest.memory_ratio_milli:
        cap[2] -= guest.memory_ratio_milli
        if host.whole:
            cap[1] = min(cap[1], 2**62)  # bytes left are not known without the card: ratios only from now on
    elif guest.memory:
        cap[1] -= guest.memory


def pack(host: ContainerRequest, guests: list[ContainerRequest]) -> list[dict[str, list[int]]] | None:
    """Per guest, per device type, the indexes of the host's cards it takes (guests running together:
    their shares add up on a card); None when they do not fit."""
    caps = {d.type: [_cap(d) for _ in range(d.count)] for d in host.devices}
    out: list[dict[str, list[int]]] = []
    for g in guests:
        mine: dict[str, list[int]] = {}
        for d in g.devices:
            h = host.get(d.type)
            if h is None or d.count > h.count:
                return None
            order = sorted(range(h.count), key=lambda i: (-caps[d.type][i][0], i))
            chosen = [i for i in order if _fits(caps[d.type][i], d, h)][:d.count]
            if len(chosen) < d.count:
                return None
            for i in chosen:
                _take(caps[d.type][i], d, h)
            mine[d.type] = sorted(chosen)
        out.append(mine)
    return out


def plan(pod: PodRequest) -> InitPlan:
    """How ``pod``'s containers are placed (its init containers asking for devices included)."""
    sidecars = [c for c in pod.init_containers if c.restartable and c.devices]
    plain = [c for c in pod.init_containers if not c.restartable and c.devices]
    apps = [c for c in pod.containers if c.devices]
    if not plain:
        return InitPlan(placed=pod.containers + tuple(sidecars))
    hosts = {i.name: next((a.name for a in apps if pack(a, [i]) is not None), None) for i in plain}
    if all(hosts.values()):  # 1. the app containers' devices cover every init container
        return InitPlan(placed=pod.containers + tuple(sidecars),
                        hosted=tuple((i, h) for i, h in hosts.items() if h is not None))
    for big in sorted(plain, key=lambda c: -sum(d.count * max(d.core_milli, 1) for d in c.devices)):
        others = [i for i in plain if i is not big]
        if pack(big, apps) is not None and all(pack(big, [i]) is not None for i in others):  # 2.
            hosted = [(a.name, big.name) for a in apps] + [(i.name, big.name) for i in others]
            return InitPlan(placed=(big, *sidecars), hosted=tuple(hosted), together=tuple(a.name for a in apps))
    uncovered = [i for i in plain if hosts[i.name] is None]  # 3.
    return InitPlan(placed=pod.containers + tuple(sidecars) + tuple(uncovered),
                    hosted=tuple((i, h) for i, h in hosts.items() if h is not None))


def _grant(req: DeviceRequest, host: DeviceGrant, totals: dict[tuple[str, int], int]) -> DeviceGrant:
    memory = req.memory
    if req.memory_ratio_milli:
        total = totals.get((host.type, host.minor))
        if total is None and host.memory_ratio_milli:
            total = host.memory * WHOLE // host.memory_ratio_milli
        memory = (total or 0) * req.memory_ratio_milli // WHOLE
    return DeviceGrant(type=host.type, minor=host.minor, id=host.id, core_milli=req.core_milli, memory=memory,
                       memory_ratio_milli=req.memory_ratio_milli)


def expand(pod: PodRequest, p: InitPlan, placed: PodAllocation,
           totals: dict[tuple[str, int], int] | None = None) -> PodAllocation:
    """The whole pod's allocation from the placed containers' (``placed``, in ``p.placed`` order):
    app containers in spec order, then every init container asking for devices (``init`` unless it
    is a sidecar). ``totals``: each device's memory in bytes, for shares asked as a ratio."""
    totals = totals or {}
    got = {c.name: c for c in placed.containers}
    requests = {c.name: c for c in (*pod.containers, *pod.init_containers)}
    by_host: dict[str, list[str]] = {}
    for guest, host in p.hosted:
        by_host.setdefault(host, []).append(guest)
    for host, guests in by_host.items():
        h_req, h_alloc = requests[host], got[host]
        together = [g for g in guests if g in p.together]
        alone = [g for g in guests if g not in p.together]
        packs = (list(zip(together, pack(h_req, [requests[g] for g in together]) or [], strict=False))
                 + [(g, (pack(h_req, [requests[g]]) or [{}])[0]) for g in alone])
        for guest, cards in packs:
            grants: list[DeviceGrant] = []
            for d in requests[guest].devices:
                host_grants = [g for g in h_alloc.devices if g.type == d.type]
                grants += [_grant(d, host_grants[i], totals) for i in cards.get(d.type, []) if i < len(host_grants)]
            got[guest] = ContainerAllocation(name=guest, devices=tuple(grants))
    containers = [got.get(c.name, ContainerAllocation(name=c.name)) for c in pod.containers]
    containers += [ContainerAllocation(name=c.name, devices=got[c.name].devices, init=not c.restartable)
                   for c in pod.init_containers if c.devices and c.name in got]
    return PodAllocation(node=placed.node, containers=tuple(containers))
