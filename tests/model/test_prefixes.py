"""Names under a dialect's prefix that no dialect reads (issue 36): misspellings refused with what was
meant, other systems' names (Koordinator's colocation resources, NVIDIA's MIG and shared replicas,
HAMi's priority, Aliyun's cGPU) allowed. One rule for the webhook, devshare schedule and the extender."""

from __future__ import annotations

import pytest

from devshare.model import prefixes
from devshare.model.pod import read_pod, validate_pod
from devshare.model.podresources import requests_devices


@pytest.mark.parametrize(("name", "meant"), [
    ("koordinator.sh/gpu-cores", "koordinator.sh/gpu-core"),
    ("koordinator.sh/gpu-memory-ratios", "koordinator.sh/gpu-memory-ratio"),
    ("nvidia.com/gpumemory", "nvidia.com/gpumem"),
    ("nvidia.com/gpu-cores", "nvidia.com/gpucores"),
    ("volcano.sh/vgpu-core", "volcano.sh/vgpu-cores"),
    ("aliyun.com/gpu-memory", "aliyun.com/gpu-mem"),
    ("vke.volcengine.com/mgpu-cores", "vke.volcengine.com/mgpu-core"),
])
def test_a_misspelling_is_refused_with_what_was_meant(name: str, meant: str) -> None:
    msg = prefixes.refused(name)
    assert msg is not None and msg.startswith(f"{name} is not a resource name devshare knows: did you mean {meant}?")
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {name: "1"}}}]}}
    assert requests_devices(pod)  # the webhook looks at it
    assert any(f"did you mean {meant}" in p for p in validate_pod(pod))
    _, problems = read_pod(pod)  # devshare schedule and the extender read pods through the same rule
    assert any(f"did you mean {meant}" in p for p in problems.messages())


@pytest.mark.parametrize("name", [
    "koordinator.sh/batch-cpu", "koordinator.sh/batch-memory", "koordinator.sh/mid-cpu", "koordinator.sh/mid-memory",
    "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb", "nvidia.com/gpu.shared", "nvidia.com/priority",
    "aliyun.com/gpu-core.percentage", "vke.volcengine.com/eni-ip", "koordinator.sh/npu", "example.com/gpu-cores",
])
def test_other_systems_names_are_allowed(name: str) -> None:
    assert prefixes.refused(name) is None
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {"limits": {name: "1"}}}]}}
    assert not requests_devices(pod) and validate_pod(pod) == []


def test_every_listed_name_is_under_an_owned_prefix() -> None:
    for name in [*prefixes.OTHER_SYSTEMS, *prefixes.OTHER_PATTERNS]:
        assert prefixes.owned_prefix(name), name


def test_a_zero_ask_is_not_an_ask() -> None:
    pod = {"metadata": {"name": "p"},
           "spec": {"containers": [{"name": "c", "resources": {"limits": {"koordinator.sh/gpu-cores": "0"}}}]}}
    assert validate_pod(pod) == []
