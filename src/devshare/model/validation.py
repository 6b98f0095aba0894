"""Every rule a pod's device request must follow, one small function each.

The dialect readers (:mod:`devshare.model.dialects`) and the pod reader (:mod:`devshare.model.pod`)
call these rules while they parse, so there is one implementation: ``parse_pod`` raises the
problems found, ``validate_pod`` returns them all (both in :mod:`devshare.model.pod`, which imports
this module, never the other way round). Each rule returns the message(s) for a person (what is
wrong and how to fix it), or nothing when the value is fine; the caller adds where (which container).

Sources: seed 000's webhook section (normal and multiple mGPU pods), seed 001's resource
dimensions (Koordinator), seed 002 (Aliyun), seed 003 (groups and gang), DESIGN.md.
"""

from __future__ import annotations

from typing import Any

from devshare.model import names
from devshare.model.quantity import MIB
from devshare.model.request import MAX_DEVICES

MIN_MIB = names.MIN_GPU_MEMORY // MIB  # seed 000's MinGPUMemory in MiB (256)
CARD_PCT = 100  # percent of one whole device

# ----------------------------------------------------------------------------------------------
# Koordinator (seed 001): gpu, gpu-core, gpu-memory, gpu-memory-ratio, rdma, fpga


def percent_value(name: str, value: int) -> str | None:
    """A percent dimension: above 0, and above 100 only as whole devices (a multiple of 100)."""
    if value < 0:
        return f"{name} is {value}; it must be above 0 (percent of one device, 100 = a whole device)"
    if value > MAX_DEVICES * CARD_PCT:
        return (f"{name} is {value}: that is more than {MAX_DEVICES} whole devices, more than any node has; give "
                "a percent of one device (at most 100), or 100 per whole device")
    if value > CARD_PCT and value % CARD_PCT:
        return (
            f"{name} is {value}; above 100 it asks for several whole devices and must be a multiple "
            f"of 100: write {value // CARD_PCT * CARD_PCT} or {(value // CARD_PCT + 1) * CARD_PCT}, "
            "or at most 100 for a share of one device"
        )
    return None


def devices_for(percent: int) -> int:
    """How many devices a percent value asks for (1 up to 100, else percent / 100)."""
    return percent // CARD_PCT if percent > CARD_PCT else 1


def koord_gpu_alone(gpu_name: str, others: list[str]) -> str | None:
    """``gpu`` already means core and memory ratio: it cannot be combined with the other GPU names."""
    if not others:
        return None
    return (
        f"{gpu_name} already asks for compute and memory ratio together, so it cannot be combined "
        f"with {', '.join(others)}: ask either {gpu_name} alone, or gpu-core with gpu-memory-ratio "
        "(or gpu-memory)"
    )


def koord_memory_or_ratio(memory_name: str | None, ratio_name: str | None) -> str | None:
    """GPU memory is asked either in bytes or as a ratio, not both."""
    if memory_name and ratio_name:
        return (
            f"{memory_name} and {ratio_name} both ask for GPU memory: keep one of them "
            "(bytes with gpu-memory, or percent of the device's memory with gpu-memory-ratio)"
        )
    return None


def koord_core_and_memory(core_name: str | None, memory_name: str | None) -> str | None:
    """gpu-core and a memory dimension go together (Koordinator refuses either one alone)."""
    if core_name and not memory_name:
        return (
            f"{core_name} asks for GPU compute but no GPU memory: add koordinator.sh/gpu-memory-ratio "
            "(percent) or koordinator.sh/gpu-memory (bytes), or ask koordinator.sh/gpu for both at once"
        )
    if memory_name and not core_name:
        return (
            f"{memory_name} asks for GPU memory but no GPU compute: add koordinator.sh/gpu-core "
            "(percent of one GPU), or ask koordinator.sh/gpu for both at once"
        )
    return None


def koord_same_count(core_name: str, core: int, ratio_name: str, ratio: int) -> str | None:
    """gpu-core and gpu-memory-ratio must ask for the same number of devices."""
    a, b = devices_for(core), devices_for(ratio)
    if a == b:
        return None
    return (
        f"{core_name}={core} asks for {a} GPU(s) but {ratio_name}={ratio} for {b}: above 100 both mean "
        f"whole GPUs, so write the same multiple of 100 in both (e.g. {max(a, b) * CARD_PCT} and "
        f"{max(a, b) * CARD_PCT}), or keep both at most 100 for a share of one GPU"
    )


def koord_memory_split(memory_name: str, memory: int, count: int) -> str | None:
    """gpu-memory over several GPUs is split evenly: it must divide into whole bytes."""
    if count > 1 and memory % count:
        return (
            f"{memory_name}={memory} bytes cannot be split evenly over {count} GPUs: "
            f"use a multiple of {count} bytes (e.g. {memory // count * count})"
        )
    return None


def koord_spelling(short: str, spellings: list[tuple[str, Any]]) -> str | None:
    """The koordinator.sh/ and kubernetes.io/ spellings of one name, when both given, must agree."""
    if len(spellings) > 1 and spellings[0][1] != spellings[1][1]:
        (a, va), (b, vb) = spellings[0], spellings[1]
        return f"{a}={va!r} and {b}={vb!r} ask for {short} twice with different values: keep only {a}"
    return None


# ----------------------------------------------------------------------------------------------
# NVIDIA


def whole_devices(name: str, value: int) -> str | None:
    """A count of whole devices (nvidia.com/gpu, aliyun.com/gpu-count): zero or more."""
    if value < 0:
        return f"{name} is {value}; it must be a number of whole GPUs, 1 or more"
    return None


# ----------------------------------------------------------------------------------------------
# mGPU (seed 000), normal pods: no vke.volcengine.com/container-multiple-gpu annotation


def mgpu_positive(core: int | None, memory: int | None) -> list[str]:
    """Rule 1: mgpu-core <= 0 or mgpu-memory <= 0 is refused (a missing mgpu-core counts as 0
    when mgpu-memory is given)."""
    out: list[str] = []
    if core is None and memory is not None:
        out.append(
            f"{names.MGPU_MEMORY} is given without {names.MGPU_CORE}: add {names.MGPU_CORE} "
            "(percent of one card, 100 per card)"
        )
    if core is not None and core <= 0:
        out.append(f"{names.MGPU_CORE} is {core}; it must be above 0 (percent of one card, 100 per card)")
    if memory is not None and memory <= 0:
        out.append(f"{names.MGPU_MEMORY} is {memory}; it must be above 0 (MiB of card memory)")
    return out


def mgpu_min_memory(core: int, memory: int | None) -> str | None:
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
            f"{names.MGPU_CORE}={core} asks for a share of a card but {names.MGPU_MEMORY} is not set: "
            f"add {names.MGPU_MEMORY} of at least {MIN_MIB} (MiB)"
        )
    if 0 < memory < MIN_MIB:
        return (
            f"{names.MGPU_MEMORY}={memory} MiB is below the minimum of {MIN_MIB} MiB a container "
            f"needs to run: ask at least {MIN_MIB}"
        )
    return None


def mgpu_full_cards(core: int) -> str | None:
    """Rule 3: above 100, mgpu-core asks for whole cards and must be a multiple of 100."""
    if core > CARD_PCT and core % CARD_PCT:
        return (
            f"{names.MGPU_CORE}={core}: above 100 it asks for whole cards and must be a multiple of 100 "
            f"(write {core // CARD_PCT * CARD_PCT} or {(core // CARD_PCT + 1) * CARD_PCT}), or set "
            f"{names.MGPU_MULTIPLE} to spread a share over several cards"
        )
    return None


def mgpu_redundant_memory(core: int, memory: int | None) -> str | None:
    """Rule 4: whole cards (core a multiple of 100) take all their memory: mgpu-memory must not be set."""
    if core > 0 and core % CARD_PCT == 0 and memory is not None:
        return (
            f"{names.MGPU_CORE}={core} asks for {core // CARD_PCT} whole card(s), which come with all their "
            f"memory: remove {names.MGPU_MEMORY}"
        )
    return None


# ----------------------------------------------------------------------------------------------
# mGPU (seed 000), multiple pods: vke.volcengine.com/container-multiple-gpu: "2,1,3"


def mgpu_count_list(text: str, n_containers: int) -> tuple[list[int] | None, list[str]]:
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
                f"{names.MGPU_MULTIPLE}={text!r}: entry {i} ({p!r}) is not a whole number; write one card "
                'count per container, e.g. "2,1,3"'
            )
            continue
        if n < 0:
            problems.append(f"{names.MGPU_MULTIPLE}={text!r}: entry {i} is {n}; a number of cards must be 1 or more")
        elif n > MAX_DEVICES:
            problems.append(f"{names.MGPU_MULTIPLE}={text!r}: entry {i} is {n}; a container may ask for at most "
                            f"{MAX_DEVICES} cards")
        counts.append(n)
    if not problems and len(counts) != n_containers:
        problems.append(
            f"{names.MGPU_MULTIPLE}={text!r} lists {len(counts)} card count(s) but the pod has "
            f"{n_containers} container(s): write exactly one count per container, in container order"
        )
    return (None if problems else counts), problems


def mgpu_count_for_container(count: int) -> str | None:
    """Rule m2 for a container that asks for mGPU: it needs at least one card."""
    if count < 1:
        return (
            f"{names.MGPU_MULTIPLE} gives this container {count} cards but it asks for "
            f"{names.MGPU_CORE}: give it 1 or more cards"
        )
    return None


def mgpu_multi_core_per_card(core: int, count: int) -> str | None:
    """Rule m4.3: mgpu-core / card count cannot exceed 100 (one card's compute)."""
    if core > CARD_PCT * count:
        return (
            f"{names.MGPU_CORE}={core} over {count} card(s) is {core / count:g}% of each card, more than "
            f"100: lower {names.MGPU_CORE} to at most {CARD_PCT * count} or raise the card count in "
            f"{names.MGPU_MULTIPLE}"
        )
    return None


def mgpu_multi_divisible(core: int, memory: int | None, count: int) -> list[str]:
    """Rule m4.2: mgpu-core and mgpu-memory must divide evenly by the card count.

    Seed 000 also shows "2,1,3" with container 2 at 33.33% of three cards; its own rule says the
    core must be divisible by the count, and the rule wins: 100 over 3 cards is refused."""
    out: list[str] = []
    if core % count:
        out.append(
            f"{names.MGPU_CORE}={core} does not divide evenly over {count} cards: use a multiple of {count} "
            f"(e.g. {max(count, core // count * count)})"
        )
    if memory is not None and memory % count:
        out.append(
            f"{names.MGPU_MEMORY}={memory} MiB does not divide evenly over {count} cards: use a multiple "
            f"of {count} (e.g. {max(count, memory // count * count)})"
        )
    return out


def mgpu_multi_redundant_memory(core: int, memory: int | None, count: int) -> str | None:
    """Rule m3: mgpu-core / count == 100 means whole cards: mgpu-memory must not be set."""
    if memory is not None and core == CARD_PCT * count:
        return (
            f"{names.MGPU_CORE}={core} over {count} card(s) is 100% of each card, i.e. whole cards that "
            f"come with all their memory: remove {names.MGPU_MEMORY}"
        )
    return None


def mgpu_multi_min_memory(core: int, memory: int | None, count: int) -> str | None:
    """Rule m4.1: a share of each card needs mgpu-memory / count >= MinGPUMemory."""
    if core >= CARD_PCT * count:
        return None
    if memory is None:
        return (
            f"{names.MGPU_CORE}={core} over {count} card(s) is a share of each card but "
            f"{names.MGPU_MEMORY} is not set: add at least {MIN_MIB * count} (MiB, {MIN_MIB} per card)"
        )
    if memory > 0 and memory // count < MIN_MIB:
        return (
            f"{names.MGPU_MEMORY}={memory} MiB over {count} card(s) is {memory / count:g} MiB per card, "
            f"below the {MIN_MIB} MiB minimum: ask at least {MIN_MIB * count}"
        )
    return None


# ----------------------------------------------------------------------------------------------
# Aliyun (seed 002)


def aliyun_gpu_mem(value: int) -> str | None:
    if value < 0:
        return f"{names.ALIYUN_GPU_MEM} is {value}; it must be above 0 (MiB of memory on one GPU)"
    return None


def aliyun_gpu_count(value: int) -> str | None:
    if value < 0:
        return (
            f"{names.ALIYUN_GPU_COUNT} is {value}; it must be 1 or more (the number of GPUs; "
            f"{names.ALIYUN_GPU_MEM} is then the memory on each)"
        )
    return None


# ----------------------------------------------------------------------------------------------
# Pod level


def one_dialect(dialects: list[str], what: str) -> str | None:
    """One container (``what="container"``) or pod (``"pod"``) asks in one dialect."""
    distinct = sorted(set(dialects))
    if len(distinct) <= 1:
        return None
    return (
        f"the {what} asks for devices in several dialects ({', '.join(distinct)}), whose allocations "
        f"are written differently: use one of them for the whole {what}"
    )


def init_container_devices(asked: list[str]) -> str | None:
    if not asked:
        return None
    return (
        f"init container asks for {', '.join(asked)}: devices are given to app containers only; "
        "move the request to a container in spec.containers"
    )


def node_name_bypass(node_name: Any, has_devices: bool, allocated: bool) -> str | None:
    """A pod created with spec.nodeName skips the scheduler, so its devices would never be allocated."""
    if not has_devices or not node_name or allocated:
        return None
    return (
        f"is set to {node_name!r}, which bypasses the scheduler, so no device would be "
        "allocated: remove spec.nodeName and pin the node with a nodeSelector on kubernetes.io/hostname"
    )


def compute_policy(value: Any) -> str | None:
    if value is None or value in names.COMPUTE_POLICIES:
        return None
    return (
        f"annotation {names.COMPUTE_POLICY}={value!r} is not a compute policy: use one of "
        f"{', '.join(names.COMPUTE_POLICIES)}, or remove it to fit any node"
    )


def multi_share_policy(policy: str | None, multi_card_share: bool) -> str | None:
    """Seed 000: one container over several shared cards needs the native-burst-share policy."""
    if not multi_card_share or policy is None or policy == names.MULTI_SHARE_POLICY:
        return None
    return (
        f"a container spreads a share over several GPUs, which needs the {names.MULTI_SHARE_POLICY} "
        f"compute policy, but annotation {names.COMPUTE_POLICY} asks for {policy!r}: set it to "
        f"{names.MULTI_SHARE_POLICY} or remove it"
    )


def positive_int_text(key: str, value: Any) -> tuple[int | None, str | None]:
    """A label/annotation holding a count (replica, min-available): a whole number >= 1."""
    try:
        n = int(str(value).strip(), 10)
    except ValueError:
        return None, f'{key}={value!r} is not a whole number: write the number of pods, e.g. "4"'
    if n < 1:
        return None, f"{key}={value!r} must be 1 or more"
    return n, None


def group_consistent(
    name: str | None, replicas: int | None, gang_name: str | None, min_available: int | None
) -> list[str]:
    """Seed 003: the group label and the gang annotation, when both are set, must agree."""
    out: list[str] = []
    if name is not None and gang_name is not None and name != gang_name:
        out.append(
            f"label {names.GROUP_NAME}={name!r} and annotation {names.GANG_NAME}={gang_name!r} "
            "must be the same: give both the job's name"
        )
    if replicas is not None and min_available is not None and replicas != min_available:
        out.append(
            f"label {names.GROUP_REPLICA}={replicas} and annotation {names.GANG_MIN_AVAILABLE}="
            f"{min_available} must be the same: both are the job's number of pods"
        )
    return out


def group_complete(name: str | None, count: str | None, name_key: str, count_key: str) -> str | None:
    """A group (or gang) needs both its name and its count (the raw label/annotation values)."""
    if (name is None) == (count is None):
        return None
    missing, given = (count_key, name_key) if count is None else (name_key, count_key)
    return f"{given} is set but {missing} is not: set both (the job's name and its number of pods)"
