"""The Koordinator dialect's annotation codec (``device-allocated``): the seed's example and spellings,
round trips, malformed values."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.dialects import koordinator
from devshare.model.dialects.koordinator import decode_koordinator, device_totals, encode_koordinator
from devshare.model.errors import InvalidAnnotation
from devshare.model.quantity import GIB
from support.allocations import allocations, gpu


def test_koordinator_example() -> None:
    alloc = PodAllocation(
        node="n",
        containers=(
            ContainerAllocation(
                name="c", devices=(gpu(0, 500, 8 * GIB, 500), DeviceGrant(type="rdma", minor=1, core_milli=1000))
            ),
        ),
    )
    doc = json.loads(encode_koordinator(alloc)[koordinator.KOORD_DEVICE_ALLOCATED])
    assert doc == {
        "gpu": [
            {
                "minor": 0,
                "resources": {
                    "koordinator.sh/gpu-core": "50",
                    "koordinator.sh/gpu-memory": "8Gi",
                    "koordinator.sh/gpu-memory-ratio": "50",
                },
            }
        ],
        "rdma": [{"minor": 1, "resources": {"koordinator.sh/rdma": "100"}}],
    }


def test_koordinator_seed_spellings() -> None:
    """Seed 001's DeviceAllocations comment: kubernetes.io/, gpu-mem(-ratio), and its "resouurces"."""
    text = json.dumps(
        {
            "gpu": [
                {
                    "minor": 0,
                    "resouurces": {
                        "kubernetes.io/gpu-core": 100,
                        "kubernetes.io/gpu-mem-ratio": 100,
                        "kubernetes.io/gpu-mem": "16Gi",
                    },
                },
                {"minor": 1, "resources": {"kubernetes.io/gpu-core": "33.3", "kubernetes.io/gpu-memory": "1Gi"}},
            ]
        }
    )
    assert decode_koordinator({koordinator.KOORD_DEVICE_ALLOCATED: text}) == {
        "gpu": [gpu(0, 1000, 16 * GIB, 1000), gpu(1, 333, GIB, 0)]
    }


def test_koordinator_adds_up_containers_on_one_device() -> None:
    alloc = PodAllocation(
        node="n",
        containers=(
            ContainerAllocation(name="a", devices=(gpu(2, 300, GIB, 0),)),
            ContainerAllocation(name="b", devices=(gpu(2, 200, GIB, 0), gpu(0, 1000, 0, 1000))),
        ),
    )
    assert decode_koordinator(encode_koordinator(alloc)) == {"gpu": [gpu(0, 1000, 0, 1000), gpu(2, 500, 2 * GIB, 0)]}


@given(allocations())
def test_koordinator_round_trip(alloc: PodAllocation) -> None:
    assert decode_koordinator(encode_koordinator(alloc)) == device_totals(alloc)


@pytest.mark.parametrize(
    "text",
    [
        "x",
        "[]",
        '{"gpu": {}}',
        '{"gpu": [1]}',
        '{"gpu": [{"minor": -1}]}',
        '{"gpu": [{"minor": 0, "resources": []}]}',
        '{"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-core": "lots"}}]}',
        '{"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-memory": "1.5"}}]}',
        '{"rdma": [{"minor": 0, "resources": {"koordinator.sh/rdma": "-1"}}]}',
    ],
)
def test_koordinator_malformed(text: str) -> None:
    with pytest.raises(InvalidAnnotation):
        decode_koordinator({koordinator.KOORD_DEVICE_ALLOCATED: text})
    assert decode_koordinator({}) is None


# --- issue 36: current Koordinator's asks, the id beside the minor, pods Koordinator placed
# (koordinator-sh/koordinator a7a1b76b: pkg/scheduler/plugins/deviceshare/utils.go ValidDeviceResourceCombinations,
# devicehandler_gpu.go calcDesiredRequestsAndCountForGPU, pkg/webhook/pod/validating/verify_device_resource.go,
# plugin.go fillID, apis/extension/device_share.go DeviceAllocation)


def _pod36(limits: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}


def test_gpu_shared_splits_the_amounts_over_the_cards() -> None:
    from devshare.model.pod import parse_pod, validate_pod
    from devshare.model.request import DeviceRequest

    req = parse_pod(_pod36({"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "100",
                            "koordinator.sh/gpu-memory": "16Gi"}))
    assert req.dialect == "koordinator"
    assert req.containers[0].devices == (DeviceRequest(type="gpu", count=2, core_milli=500, memory=8 * 2**30),)
    req = parse_pod(_pod36({"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-memory-ratio": "100"}))
    assert req.containers[0].devices == (DeviceRequest(type="gpu", count=2, memory_ratio_milli=500),)
    assert parse_pod(_pod36({"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "200",
                             "koordinator.sh/gpu-memory-ratio": "200"})).containers[0].devices[0].whole
    for limits, words in [
        ({"koordinator.sh/gpu.shared": "2"}, "needs the memory it shares"),
        ({"koordinator.sh/gpu.shared": "3", "koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "30"},
         "multiple of koordinator.sh/gpu.shared=3"),
        ({"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "300", "koordinator.sh/gpu-memory-ratio": "100"},
         "more than 100"),
        ({"koordinator.sh/gpu.shared": "1", "koordinator.sh/gpu": "50"}, "cannot be asked together"),
        ({"koordinator.sh/gpu.shared": "-1", "koordinator.sh/gpu-memory-ratio": "10"}, "1 or more"),
    ]:
        problems = validate_pod(_pod36(limits))
        assert any(words in p for p in problems), (limits, problems)


def test_device_allocated_carries_the_id_beside_the_minor() -> None:
    import json

    from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
    from devshare.model.dialects.koordinator import encode_koordinator

    g = DeviceGrant(type="gpu", minor=2, id="GPU-2", core_milli=300, memory=6 * 2**30, memory_ratio_milli=150)
    doc = json.loads(encode_koordinator(PodAllocation(node="n", containers=(
        ContainerAllocation(name="c", devices=(g,)),)))["scheduling.koordinator.sh/device-allocated"])
    assert doc == {"gpu": [{"minor": 2, "id": "GPU-2", "resources": {
        "koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory": "6Gi", "koordinator.sh/gpu-memory-ratio": "15"}}]}


def test_above_100_in_whole_multiples_is_whole_cards_on_any_node() -> None:
    from devshare.engine.scheduler import Scheduler
    from devshare.engine.state import ClusterState
    from devshare.model.device import DeviceInfo, NodeDevices
    from devshare.model.node import node_info_from_labels
    from devshare.model.pod import parse_pod

    st = ClusterState()
    st.upsert_node(node_info_from_labels("plain"))  # no mGPU multi-card label
    st.set_devices(NodeDevices(node="plain", devices=tuple(
        DeviceInfo(type="gpu", minor=i, id=f"G{i}", memory=40 * 2**30) for i in range(2))))
    pod = parse_pod(_pod36({"koordinator.sh/gpu-core": "200", "koordinator.sh/gpu-memory": "64Gi"}))
    placed = Scheduler(st).place(pod)
    assert placed is not None and all(u.whole for u in placed.allocation.usage())
    assert Scheduler(st).place(parse_pod(_pod36({"nvidia.com/gpu": "2"}))) is not None
