"""Volcano mGPU (seed 000): ``vke.volcengine.com/mgpu-core`` (percent of one card, 100 per card)
and ``vke.volcengine.com/mgpu-memory`` (MiB, as a quantity: ``6k`` is 6000 MiB).

Without the pod annotation ``vke.volcengine.com/container-multiple-gpu``, a container asks for a
share of one card (core below 100, with at least MinGPUMemory), or for core / 100 whole cards
(core a multiple of 100, no memory). With it (``"2,1,3"``: one card count per container, in
container order), container i's core and memory are split evenly over that many cards.

Seed 000 contradicts itself: its "2,1,3" example puts container 2 at 33.33% of three cards (core
100 over 3), while its webhook rule says core and memory must be divisible by the count. The rule
wins: a core (or memory) that does not divide evenly by the count is refused, with a message
saying which multiple to use.

The scheduling result it writes: ``vke.volcengine.com/gpu-index-container-<container name>: "1,0"``
(the GPU indexes of each container that got GPUs; with seed 000's ``MGPUScheduleMode: id``, the
configuration file's ``scheduling.scheduleMode: id``, their UUIDs) and ``vke.volcengine.com/assumed: "true"``.
Kubernetes limits an annotation name to 63 characters, so a container name longer than 43
characters gives a key the API server refuses; mGPU's node agent has the same limit.
"""

from __future__ import annotations

from typing import Any

from devshare.model import names
from devshare.model.allocation import PodAllocation
from devshare.model.codecs.units import index_list
from devshare.model.dialects.base import (
    Dialect,
    PlacedGrant,
    PlacedReading,
    read_whole,
    restartable_init,
    spec_containers,
    whole_quantity,
)
from devshare.model.problems import Problems
from devshare.model.quantity import MIB
from devshare.model.request import MAX_DEVICES, WHOLE, WHOLE_PERCENT, DeviceRequest, PodRequest

MGPU_CORE = "vke.volcengine.com/mgpu-core"
MGPU_MEMORY = "vke.volcengine.com/mgpu-memory"
MGPU_MULTIPLE = "vke.volcengine.com/container-multiple-gpu"  # pod annotation: card count per container
MGPU_ASSUMED = "vke.volcengine.com/assumed"
MGPU_INDEX_PREFIX = "vke.volcengine.com/gpu-index-container-"
NAMES = frozenset({MGPU_CORE, MGPU_MEMORY})

MIN_GPU_MEMORY = 256 * 2**20  # seed 000: MinGPUMemory, too little for a container to run below it
MIN_MIB = MIN_GPU_MEMORY // MIB
CARD_PCT = WHOLE_PERCENT  # mGPU asks compute in percent of a card

# ----------------------------------------------------------------------------------------------
# rules, normal pods (no container-multiple-gpu annotation): seed 000's webhook rules 1-4


def positive(core: int | None, memory: int | None) -> list[str]:
    """Rule 1: mgpu-core <= 0 or mgpu-memory <= 0 is refused (a missing mgpu-core counts as 0
    when mgpu-memory is given)."""
    out: list[str] = []
    if core is None and memory is not None:
        out.append(
            f"{MGPU_MEMORY} is given without {MGPU_CORE}: add {MGPU_CORE} "
            "(percent of one card, 100 per card)"
        )
    if core is not None and core <= 0:
        out.append(f"{MGPU_CORE} is {core}; it must be above 0 (percent of one card, 100 per card)")
    if memory is not None and memory <= 0:
        out.append(f"{MGPU_MEMORY} is {memory}; it must be above 0 (MiB of card memory)")
    return out


def min_memory(core: int, memory: int | None) -> str | None:
    """Rule 2: a share of a card (core not a multiple of 100) needs at least MinGPUMemory.

    Seed 000 states the rule for core in (0, 100) but illustrates it with core 120; a core above
    100 that is not a multiple of 100 is refused by rule 3 anyway, so the memory check is applied
    to every share given a memory, and both problems are reported."""
    if core <= 0 or core % CARD_PCT == 0:
        return None
    if memory is None:
        if core > CARD_PCT:
            return None  # rule 3 says what to do (whole cards, or the multiple-gpu annotation)
        return (
            f"{MGPU_CORE}={core} asks for a share of a card but {MGPU_MEMORY} is not set: "
            f"add {MGPU_MEMORY} of at least {MIN_MIB} (MiB)"
        )
    if 0 < memory < MIN_MIB:
        return (
            f"{MGPU_MEMORY}={memory} MiB is below the minimum of {MIN_MIB} MiB a container "
            f"needs to run: ask at least {MIN_MIB}"
        )
    return None


def full_cards(core: int) -> str | None:
    """Rule 3: above 100, mgpu-core asks for whole cards and must be a multiple of 100."""
    if core > CARD_PCT and core % CARD_PCT:
        return (
            f"{MGPU_CORE}={core}: above 100 it asks for whole cards and must be a multiple of 100 "
            f"(write {core // CARD_PCT * CARD_PCT} or {(core // CARD_PCT + 1) * CARD_PCT}), or set "
            f"{MGPU_MULTIPLE} to spread a share over several cards"
        )
    return None


def redundant_memory(core: int, memory: int | None) -> str | None:
    """Rule 4: whole cards (core a multiple of 100) take all their memory: mgpu-memory must not be set."""
    if core > 0 and core % CARD_PCT == 0 and memory is not None:
        return (
            f"{MGPU_CORE}={core} asks for {core // CARD_PCT} whole card(s), which come with all their "
            f"memory: remove {MGPU_MEMORY}"
        )
    return None


# ----------------------------------------------------------------------------------------------
# rules, multiple pods (container-multiple-gpu: "2,1,3"): seed 000's rules m1-m4


def count_list(text: str, n_containers: int) -> tuple[list[int] | None, list[str]]:
    """Parse the per-container card counts. Rules m1 (one count per container) and m2 (counts are
    whole numbers, not negative). Returns (counts or None when unusable, problems)."""
    parts = [p.strip() for p in text.split(",")]
    counts: list[int] = []
    problems: list[str] = []
    for i, p in enumerate(parts):
        try:
            n = int(p, 10)
        except ValueError:
            problems.append(
                f"{MGPU_MULTIPLE}={text!r}: entry {i} ({p!r}) is not a whole number; write one card "
                'count per container, e.g. "2,1,3"'
            )
            continue
        if n < 0:
            problems.append(f"{MGPU_MULTIPLE}={text!r}: entry {i} is {n}; a number of cards must be 1 or more")
        elif n > MAX_DEVICES:
            problems.append(f"{MGPU_MULTIPLE}={text!r}: entry {i} is {n}; a container may ask for at most "
                            f"{MAX_DEVICES} cards")
        counts.append(n)
    if not problems and len(counts) != n_containers:
        problems.append(
            f"{MGPU_MULTIPLE}={text!r} lists {len(counts)} card count(s) but the pod has "
            f"{n_containers} container(s): write exactly one count per container, in container order"
        )
    return (None if problems else counts), problems


def count_for_container(count: int) -> str | None:
    """Rule m2 for a container that asks for mGPU: it needs at least one card."""
    if count < 1:
        return (
            f"{MGPU_MULTIPLE} gives this container {count} cards but it asks for "
            f"{MGPU_CORE}: give it 1 or more cards"
        )
    return None


def multi_core_per_card(core: int, count: int) -> str | None:
    """Rule m4.3: mgpu-core / card count cannot exceed 100 (one card's compute)."""
    if core > CARD_PCT * count:
        return (
            f"{MGPU_CORE}={core} over {count} card(s) is {core / count:g}% of each card, more than "
            f"100: lower {MGPU_CORE} to at most {CARD_PCT * count} or raise the card count in "
            f"{MGPU_MULTIPLE}"
        )
    return None


def multi_divisible(core: int, memory: int | None, count: int) -> list[str]:
    """Rule m4.2: mgpu-core and mgpu-memory must divide evenly by the card count.

    Seed 000 also shows "2,1,3" with container 2 at 33.33% of three cards; its own rule says the
    core must be divisible by the count, and the rule wins: 100 over 3 cards is refused."""
    out: list[str] = []
    if core % count:
        out.append(
            f"{MGPU_CORE}={core} does not divide evenly over {count} cards: use a multiple of {count} "
            f"(e.g. {max(count, core // count * count)})"
        )
    if memory is not None and memory % count:
        out.append(
            f"{MGPU_MEMORY}={memory} MiB does not divide evenly over {count} cards: use a multiple "
            f"of {count} (e.g. {max(count, memory // count * count)})"
        )
    return out


def multi_redundant_memory(core: int, memory: int | None, count: int) -> str | None:
    """Rule m3: mgpu-core / count == 100 means whole cards: mgpu-memory must not be set."""
    if memory is not None and core == CARD_PCT * count:
        return (
            f"{MGPU_CORE}={core} over {count} card(s) is 100% of each card, i.e. whole cards that "
            f"come with all their memory: remove {MGPU_MEMORY}"
        )
    return None


def multi_min_memory(core: int, memory: int | None, count: int) -> str | None:
    """Rule m4.1: a share of each card needs mgpu-memory / count >= MinGPUMemory."""
    if core >= CARD_PCT * count:
        return None
    if memory is None:
        return (
            f"{MGPU_CORE}={core} over {count} card(s) is a share of each card but "
            f"{MGPU_MEMORY} is not set: add at least {MIN_MIB * count} (MiB, {MIN_MIB} per card)"
        )
    if memory > 0 and memory // count < MIN_MIB:
        return (
            f"{MGPU_MEMORY}={memory} MiB over {count} card(s) is {memory / count:g} MiB per card, "
            f"below the {MIN_MIB} MiB minimum: ask at least {MIN_MIB * count}"
        )
    return None


# ----------------------------------------------------------------------------------------------
# reader


def _whole_cards(n: int) -> DeviceRequest:
    return DeviceRequest(type=names.GPU, count=n, core_milli=WHOLE, memory_ratio_milli=WHOLE)


def _normal(core: int, memory: int | None, where: str, problems: Problems) -> DeviceRequest | None:
    msgs = [
        min_memory(core, memory),
        full_cards(core),
        redundant_memory(core, memory),
    ]
    if any(msgs):
        problems.extend(where, [m for m in msgs if m])
        return None
    if core % CARD_PCT == 0:
        return _whole_cards(core // CARD_PCT)
    assert memory is not None  # mgpu_min_memory refused a share without memory
    return DeviceRequest(type=names.GPU, count=1, core_milli=core * 10, memory=memory * MIB)


def _multiple(core: int, memory: int | None, count: int, where: str, problems: Problems) -> DeviceRequest | None:
    msg = count_for_container(count)
    if msg:
        problems.add(where, msg)
        return None
    msgs = [
        multi_core_per_card(core, count),
        *multi_divisible(core, memory, count),
        multi_redundant_memory(core, memory, count),
        multi_min_memory(core, memory, count),
    ]
    if any(msgs):
        problems.extend(where, [m for m in msgs if m])
        return None
    if core == CARD_PCT * count:
        return _whole_cards(count)
    assert memory is not None  # mgpu_multi_min_memory refused a share without memory
    return DeviceRequest(type=names.GPU, count=count, core_milli=core * 10 // count, memory=memory * MIB // count)


def read_container(resources: dict[str, Any], where: str, problems: Problems, count: int | None = None,
                   counts_bad: bool = False) -> list[DeviceRequest]:
    """The container's request. ``count``: its entry of container-multiple-gpu (None without the
    annotation); ``counts_bad``: the annotation is present but unusable (only rule 1 is checked)."""
    core = read_whole(resources, MGPU_CORE, where, problems, "percent")
    memory = read_whole(resources, MGPU_MEMORY, where, problems, "MiB")
    if core is None and memory is None:
        return []
    msgs = positive(core, memory)
    if msgs:
        problems.extend(where, msgs)
        return []
    if core is None or counts_bad:
        return []
    req = _normal(core, memory, where, problems) if count is None else _multiple(core, memory, count, where, problems)
    return [req] if req is not None else []


# ----------------------------------------------------------------------------------------------
# annotation codec


def encode_mgpu(alloc: PodAllocation, mode: str = "index") -> dict[str, str]:
    """Seed 000's result annotations; ``mode`` is its MGPUScheduleMode: the GPUs of each container by
    index (``"1,0"``) or by id (``"GPU-98583a5c-...,GPU-7f6410b9-..."``, the UUIDs the Device object
    lists; a GPU without one is written by index)."""
    out = {MGPU_ASSUMED: "true"}
    for c in alloc.containers:
        gpus = [g for g in c.devices if g.type == names.GPU]
        if gpus:
            out[MGPU_INDEX_PREFIX + c.name] = ",".join(g.id if mode == "id" and g.id else str(g.minor) for g in gpus)
    return out


def decode_mgpu_devices(annotations: dict[str, str]) -> dict[str, list[str]] | None:
    """Container name -> its GPUs as written (indexes or ids, either schedule mode); None when the
    pod carries no mGPU result."""
    out = {key[len(MGPU_INDEX_PREFIX):]: [x.strip() for x in str(value).split(",") if x.strip()]
           for key, value in annotations.items() if key.startswith(MGPU_INDEX_PREFIX)}
    if not out and annotations.get(MGPU_ASSUMED) != "true":
        return None
    return out


def decode_mgpu(annotations: dict[str, str]) -> dict[str, list[int]] | None:
    """Container name -> GPU indexes; None when the pod carries no mGPU result."""
    out: dict[str, list[int]] = {}
    for key, value in annotations.items():
        if key.startswith(MGPU_INDEX_PREFIX):
            out[key[len(MGPU_INDEX_PREFIX) :]] = index_list(str(value), field=f"annotation {key}")
    if not out and annotations.get(MGPU_ASSUMED) != "true":
        return None
    return out


# ----------------------------------------------------------------------------------------------
# pods mGPU placed


def read_placed(annotations: dict[str, str], spec: Any) -> PlacedReading | None:
    """A pod mGPU placed: each container's ``gpu-index-container-<name>`` (indexes, or UUIDs in seed 000's
    ``MGPUScheduleMode: id``) with the container's own ``mgpu-core`` (percent over its cards) and
    ``mgpu-memory`` (MiB over its cards), split evenly, as seed 000 allocates them."""
    devices = decode_mgpu_devices(annotations)
    if devices is None:
        return None
    init, app = spec_containers(spec)
    resources = dict(init + app)
    init_names = {n for n, _ in init} - restartable_init(spec)
    grants: list[PlacedGrant] = []
    problems: list[str] = []
    for name, refs in devices.items():
        if not refs:
            continue
        res = resources.get(name)
        core = whole_quantity(res.get(MGPU_CORE)) if res else None
        memory = whole_quantity(res.get(MGPU_MEMORY)) if res else None
        k = len(refs)
        if res is None or core is None or core <= 0 or (memory is not None and memory < 0):
            problems.append(f"annotation {MGPU_INDEX_PREFIX}{name} names {k} GPU(s) but container {name!r} asks for no "
                            f"readable {MGPU_CORE}: its GPUs are counted whole")
            per_core, per_mem, whole = None, None, True
        else:
            whole = memory is None and core >= CARD_PCT * k
            per_core, per_mem = core * 10 // k, (memory * MIB // k if memory is not None else None)
        for ref in refs:
            minor = int(ref) if ref.isascii() and ref.isdigit() else None
            grants.append(PlacedGrant(container=name, init=name in init_names, minor=minor,
                                      id="" if minor is not None else ref, core_milli=per_core,
                                      memory=per_mem, whole=whole))
    return PlacedReading(dialect="mgpu", grants=tuple(grants), problems=tuple(problems))


# ----------------------------------------------------------------------------------------------
# the dialect


class MgpuDialect(Dialect):
    name = "mgpu"
    multi_card_share_needs_label = True  # seed 000: one container over several shared cards needs the node label
    allocation_annotations = frozenset({MGPU_ASSUMED})
    allocation_prefixes = (MGPU_INDEX_PREFIX,)
    resource_names = NAMES
    managed_resources = (MGPU_CORE, MGPU_MEMORY)

    def pod_context(self, annotations: dict[str, str], n_containers: int, problems: Problems) -> Any:
        """(card count per container or None, whether the annotation is there but unusable)."""
        multiple = annotations.get(MGPU_MULTIPLE)
        if multiple is None:
            return None, False
        counts, msgs = count_list(multiple, n_containers)
        problems.extend(f"annotation {MGPU_MULTIPLE}", msgs)
        return counts, counts is None

    def read(self, resources: dict[str, Any], where: str, problems: Problems, context: Any,
             index: int) -> list[DeviceRequest]:
        counts, counts_bad = context if context is not None else (None, False)
        count = counts[index] if counts is not None else None
        return read_container(resources, where, problems, count, counts_bad)

    def encode(self, pod: PodRequest, alloc: PodAllocation, *, now_ns: int,
               device_memory: dict[int, int] | None) -> dict[str, str]:
        return encode_mgpu(alloc, self.schedule_mode) if alloc.minors(names.GPU) else {}

    def read_placed(self, annotations: dict[str, str], spec: dict[str, Any]) -> PlacedReading | None:
        return read_placed(annotations, spec)
