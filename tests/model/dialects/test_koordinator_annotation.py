"""The Koordinator dialect's annotation codec (``device-allocated``): the seed's example and spellings,
round trips, malformed values."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.dialects import koordinator_names
from devshare.model.dialects.koordinator_annotation import decode_koordinator, device_totals, encode_koordinator
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
    doc = json.loads(encode_koordinator(alloc)[koordinator_names.KOORD_DEVICE_ALLOCATED])
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
    assert decode_koordinator({koordinator_names.KOORD_DEVICE_ALLOCATED: text}) == {
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
        decode_koordinator({koordinator_names.KOORD_DEVICE_ALLOCATED: text})
    assert decode_koordinator({}) is None


def test_device_allocated_carries_the_id_beside_the_minor() -> None:
    import json

    from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
    from devshare.model.dialects.koordinator_annotation import encode_koordinator

    g = DeviceGrant(type="gpu", minor=2, id="GPU-2", core_milli=300, memory=6 * 2**30, memory_ratio_milli=150)
    doc = json.loads(encode_koordinator(PodAllocation(node="n", containers=(
        ContainerAllocation(name="c", devices=(g,)),)))["scheduling.koordinator.sh/device-allocated"])
    assert doc == {"gpu": [{"minor": 2, "id": "GPU-2", "resources": {
        "koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory": "6Gi", "koordinator.sh/gpu-memory-ratio": "15"}}]}
