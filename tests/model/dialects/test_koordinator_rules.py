"""Koordinator's rules for its resource names (seed 001, current Koordinator's webhook), each tested
alone: None when the ask is fine, else a sentence saying what is wrong and what to write instead.
The reader applying them to pods is tested in test_koordinator.py and tests/model/test_pod_dialects.py."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from devshare.model.dialects.koordinator_rules import (
    core_and_memory,
    devices_for,
    gpu_alone,
    memory_or_ratio,
    memory_split,
    percent_value,
    same_count,
    shared_needs,
    shared_value,
    spelling,
)
from devshare.model.request import MAX_DEVICES

CORE, RATIO, MEM, SHARED = ("koordinator.sh/gpu-core", "koordinator.sh/gpu-memory-ratio", "koordinator.sh/gpu-memory",
                            "koordinator.sh/gpu.shared")


def test_percent_values() -> None:
    assert all(percent_value(CORE, v) is None for v in (0, 1, 50, 100, 200, MAX_DEVICES * 100))
    assert percent_value(CORE, -1) == f"{CORE} is -1; it must be above 0 (percent of one device, 100 = a whole device)"
    assert percent_value(CORE, 150) == (f"{CORE} is 150; above 100 it asks for several whole devices and must be a "
                                        "multiple of 100: write 100 or 200, or at most 100 for a share of one device")
    assert percent_value(CORE, MAX_DEVICES * 100 + 100) == (
        f"{CORE} is 102500: that is more than 1024 whole devices, more than any node has; give a percent of one "
        "device (at most 100), or 100 per whole device")


@given(st.integers(101, MAX_DEVICES * 100))
def test_a_refused_percent_suggests_the_multiples_around_it(value: int) -> None:
    msg = percent_value(CORE, value)
    if value % 100 == 0:
        assert msg is None and devices_for(value) * 100 == value
        return
    assert msg is not None
    m = re.search(r"write (\d+) or (\d+)", msg)
    assert m is not None
    low, high = int(m[1]), int(m[2])
    assert low % 100 == 0 and high == low + 100 and low < value < high


def test_devices_for() -> None:
    assert [devices_for(v) for v in (1, 50, 100, 200, 800)] == [1, 1, 1, 2, 8]


def test_gpu_goes_alone() -> None:
    assert gpu_alone("koordinator.sh/gpu", []) is None
    assert gpu_alone("koordinator.sh/gpu", [CORE, MEM]) == (
        f"koordinator.sh/gpu already asks for compute and memory ratio together, so it cannot be combined with {CORE}, "
        f"{MEM}: ask either koordinator.sh/gpu alone, or gpu-core with gpu-memory-ratio (or gpu-memory)")


def test_memory_in_bytes_or_as_a_ratio() -> None:
    assert memory_or_ratio(MEM, None) is None and memory_or_ratio(None, RATIO) is None
    assert memory_or_ratio(MEM, RATIO) == (
        f"{MEM} and {RATIO} both ask for GPU memory: keep one of them (bytes with gpu-memory, or percent of the "
        "device's memory with gpu-memory-ratio)")


def test_core_needs_memory_beside_it() -> None:
    assert core_and_memory(CORE, RATIO) is None
    assert core_and_memory(None, MEM) is None  # memory alone: current Koordinator's ask
    assert core_and_memory(CORE, None) == (
        f"{CORE} asks for GPU compute but no GPU memory: add {RATIO} (percent) or {MEM} (bytes), or ask "
        "koordinator.sh/gpu for both at once")


def test_shared_value() -> None:
    assert shared_value(SHARED, 1) is None
    assert shared_value(SHARED, 0) == f"{SHARED} is 0; it must be the number of GPUs shared, 1 or more"


def test_shared_needs() -> None:
    assert shared_needs(SHARED, {"gpu.shared": (SHARED, 2), "gpu-core": (CORE, 150), "gpu-memory": (MEM, 10)}) == []
    assert shared_needs(SHARED, {"gpu.shared": (SHARED, 2), "gpu": ("koordinator.sh/gpu", 50),
                                 "gpu-memory-ratio": (RATIO, 300)}) == [
        f"koordinator.sh/gpu and {SHARED} cannot be asked together (Koordinator forbids both): ask {SHARED} with "
        "gpu-core and gpu-memory (or gpu-memory-ratio)",
        f"{RATIO}=300 over 2 GPU(s) is 150 per GPU, more than 100: lower it to at most 200 or share more GPUs"]
    assert shared_needs(SHARED, {"gpu.shared": (SHARED, 3), "gpu-core": (CORE, 1)}) == [
        f"{SHARED}=3 needs the memory it shares: add {MEM} (bytes in all) or {RATIO} (percent in all, a multiple "
        "of the count)",
        f"{CORE}=1 must be a multiple of {SHARED}=3 (it is split evenly over the GPUs): write 3"]
    assert shared_needs(SHARED, {"gpu.shared": (SHARED, 3), "gpu-core": (CORE, 100),
                                 "gpu-memory-ratio": (RATIO, 99)}) == [
        f"{CORE}=100 must be a multiple of {SHARED}=3 (it is split evenly over the GPUs): write 99"]


def test_core_and_ratio_ask_for_the_same_count() -> None:
    assert same_count(CORE, 200, RATIO, 200) is None
    assert same_count(CORE, 30, RATIO, 100) is None  # both one card
    assert same_count(CORE, 200, RATIO, 50) == (
        f"{CORE}=200 asks for 2 GPU(s) but {RATIO}=50 for 1: above 100 both mean whole GPUs, so write the same "
        "multiple of 100 in both (e.g. 200 and 200), or keep both at most 100 for a share of one GPU")


@given(st.integers(1, 2**50), st.integers(1, MAX_DEVICES))
def test_memory_split_suggests_an_even_split(memory: int, count: int) -> None:
    msg = memory_split(MEM, memory, count)
    if count == 1 or memory % count == 0:
        assert msg is None
        return
    assert msg is not None
    m = re.search(r"\(e\.g\. (\d+)\)", msg)
    assert m is not None and int(m[1]) % count == 0 and memory - count < int(m[1]) < memory


def test_both_spellings_must_agree() -> None:
    assert spelling("gpu", [(CORE, "50")]) is None
    assert spelling("gpu", [(CORE, "50"), ("kubernetes.io/gpu-core", "50")]) is None
    assert spelling("gpu-core", [(CORE, "50"), ("kubernetes.io/gpu-core", "60")]) == (
        f"{CORE}='50' and kubernetes.io/gpu-core='60' ask for gpu-core twice with different values: keep only {CORE}")
