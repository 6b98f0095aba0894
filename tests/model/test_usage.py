"""The Device object's status.usage: written by the agent, read back by the same model."""

from __future__ import annotations

import pytest

from devshare.model.errors import InvalidDevice
from devshare.model.usage import ContainerUse, GpuUse, NodeUsage, parse_usage, usage_status


def test_round_trip_and_absence() -> None:
    usage = NodeUsage(at="2026-11-28T07:40:00Z", gpus=(GpuUse(minor=0, id="GPU-a", memory_used=3, utilization=None,
                                                               containers=(ContainerUse(pod="ns/p", container="c",
                                                                                        memory_used=3,
                                                                                        memory_allocated=4,
                                                                                        utilization=0.4,
                                                                                        core_allocated=0.5),)),))
    status = usage_status(usage)
    assert status["gpus"][0]["containers"][0] == {"pod": "ns/p", "container": "c", "memoryUsed": 3,
                                                  "memoryAllocated": 4, "utilization": 0.4, "coreAllocated": 0.5}
    assert parse_usage({"metadata": {"name": "n"}, "status": {"usage": status}}) == usage
    assert parse_usage({"metadata": {"name": "n"}, "spec": {}}) is None


def test_a_bad_block_names_its_field() -> None:
    with pytest.raises(InvalidDevice, match=r"Device n: status.usage.*memoryUsed"):
        parse_usage({"metadata": {"name": "n"}, "status": {"usage": {"at": "x", "gpus": [
            {"minor": 0, "id": "GPU-a", "memoryUsed": "lots"}]}}})
