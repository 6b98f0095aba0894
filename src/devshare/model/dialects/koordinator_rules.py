"""Koordinator's rules for its resource names (seed 001 and current Koordinator's webhook): each a
sentence saying what is wrong and how to fix it, or None."""

from __future__ import annotations

from typing import Any

from devshare.model.request import MAX_DEVICES, WHOLE_PERCENT


def percent_value(name: str, value: int) -> str | None:
    """A percent dimension: above 0, and above 100 only as whole devices (a multiple of 100)."""
    if value < 0:
        return f"{name} is {value}; it must be above 0 (percent of one device, 100 = a whole device)"
    if value > MAX_DEVICES * WHOLE_PERCENT:
        return (f"{name} is {value}: that is more than {MAX_DEVICES} whole devices, more than any node has; give "
                "a percent of one device (at most 100), or 100 per whole device")
    if value > WHOLE_PERCENT and value % WHOLE_PERCENT:
        return (
            f"{name} is {value}; above 100 it asks for several whole devices and must be a multiple "
            f"of 100: write {value // WHOLE_PERCENT * WHOLE_PERCENT} or "
            f"{(value // WHOLE_PERCENT + 1) * WHOLE_PERCENT}, "
            "or at most 100 for a share of one device"
        )
    return None


def devices_for(percent: int) -> int:
    """How many devices a percent value asks for (1 up to 100, else percent / 100)."""
    return percent // WHOLE_PERCENT if percent > WHOLE_PERCENT else 1


def gpu_alone(gpu_name: str, others: list[str]) -> str | None:
    """``gpu`` already means core and memory ratio: it cannot be combined with the other GPU names."""
    if not others:
        return None
    return (
        f"{gpu_name} already asks for compute and memory ratio together, so it cannot be combined "
        f"with {', '.join(others)}: ask either {gpu_name} alone, or gpu-core with gpu-memory-ratio "
        "(or gpu-memory)"
    )


def memory_or_ratio(memory_name: str | None, ratio_name: str | None) -> str | None:
    """GPU memory is asked either in bytes or as a ratio, not both."""
    if memory_name and ratio_name:
        return (
            f"{memory_name} and {ratio_name} both ask for GPU memory: keep one of them "
            "(bytes with gpu-memory, or percent of the device's memory with gpu-memory-ratio)"
        )
    return None


def core_and_memory(core_name: str | None, memory_name: str | None) -> str | None:
    """gpu-core needs a memory dimension beside it (Koordinator refuses gpu-core alone); memory alone
    (gpu-memory or gpu-memory-ratio, no compute claimed) is one of current Koordinator's asks."""
    if core_name and not memory_name:
        return (
            f"{core_name} asks for GPU compute but no GPU memory: add koordinator.sh/gpu-memory-ratio "
            "(percent) or koordinator.sh/gpu-memory (bytes), or ask koordinator.sh/gpu for both at once"
        )
    return None


def shared_value(name: str, value: int) -> str | None:
    """gpu.shared: the number of cards the container shares, 1 or more."""
    if value < 1:
        return f"{name} is {value}; it must be the number of GPUs shared, 1 or more"
    return None


def shared_needs(shared_name: str, others: dict[str, tuple[str, int]]) -> list[str]:
    """Current Koordinator's gpu.shared rules (pkg/webhook/pod/validating/verify_device_resource.go,
    pkg/scheduler/plugins/deviceshare/utils.go ValidDeviceResourceCombinationsGPUShared): memory in
    bytes or as a ratio (one of them), core and ratio multiples of the count, at most 100 per card."""
    _, n = others["gpu.shared"]
    out: list[str] = []
    if "gpu" in others:
        out.append(f"{others['gpu'][0]} and {shared_name} cannot be asked together (Koordinator forbids both): ask "
                   f"{shared_name} with gpu-core and gpu-memory (or gpu-memory-ratio)")
    if "gpu-memory" not in others and "gpu-memory-ratio" not in others:
        out.append(f"{shared_name}={n} needs the memory it shares: add koordinator.sh/gpu-memory (bytes in all) or "
                   "koordinator.sh/gpu-memory-ratio (percent in all, a multiple of the count)")
    for dim in ("gpu-core", "gpu-memory-ratio"):
        if dim in others:
            name, v = others[dim]
            if v % n:
                out.append(f"{name}={v} must be a multiple of {shared_name}={n} (it is split evenly over the GPUs): "
                           f"write {v // n * n or n}")
            elif v // n > WHOLE_PERCENT:
                out.append(f"{name}={v} over {n} GPU(s) is {v // n} per GPU, more than 100: lower it to at most "
                           f"{n * WHOLE_PERCENT} or share more GPUs")
    return out


def same_count(core_name: str, core: int, ratio_name: str, ratio: int) -> str | None:
    """gpu-core and gpu-memory-ratio must ask for the same number of devices."""
    a, b = devices_for(core), devices_for(ratio)
    if a == b:
        return None
    return (
        f"{core_name}={core} asks for {a} GPU(s) but {ratio_name}={ratio} for {b}: above 100 both mean "
        f"whole GPUs, so write the same multiple of 100 in both (e.g. {max(a, b) * WHOLE_PERCENT} and "
        f"{max(a, b) * WHOLE_PERCENT}), or keep both at most 100 for a share of one GPU"
    )


def memory_split(memory_name: str, memory: int, count: int) -> str | None:
    """gpu-memory over several GPUs is split evenly: it must divide into whole bytes."""
    if count > 1 and memory % count:
        return (
            f"{memory_name}={memory} bytes cannot be split evenly over {count} GPUs: "
            f"use a multiple of {count} bytes (e.g. {memory // count * count})"
        )
    return None


def spelling(short: str, spellings: list[tuple[str, Any]]) -> str | None:
    """The koordinator.sh/ and kubernetes.io/ spellings of one name, when both given, must agree."""
    if len(spellings) > 1 and spellings[0][1] != spellings[1][1]:
        (a, va), (b, vb) = spellings[0], spellings[1]
        return f"{a}={va!r} and {b}={vb!r} ask for {short} twice with different values: keep only {a}"
    return None
