"""``devshare.io/allocation`` (the canonical allocation annotation): the design example, round trips,
malformed values."""

from __future__ import annotations

import json

import pytest
from hypothesis import given

from devshare.model import names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.codecs import decode_allocation, encode_allocation
from devshare.model.dialects import koordinator_names
from devshare.model.errors import InvalidAnnotation
from devshare.model.quantity import GIB
from support.allocations import allocations, gpu


def test_canonical_design_example() -> None:
    text = json.dumps(
        {
            "node": "node-1",
            "containers": [
                {
                    "name": "main",
                    "devices": [
                        {
                            "type": "gpu",
                            "minor": 1,
                            "id": "GPU-7f64",
                            "core": 50,
                            "memory": 8589934592,
                            "memoryRatio": 50,
                        }
                    ],
                },
                {"name": "sidecar", "devices": []},
            ],
        }
    )
    alloc = decode_allocation({names.ALLOCATION: text})
    assert alloc == PodAllocation(
        node="node-1",
        containers=(
            ContainerAllocation(name="main", devices=(gpu(1, 500, 8 * GIB, 500, "GPU-7f64"),)),
            ContainerAllocation(name="sidecar"),
        ),
    )
    assert json.loads(encode_allocation(alloc)) == json.loads(text)


def test_canonical_percent_and_share() -> None:
    alloc = PodAllocation(
        node="n",
        containers=(
            ContainerAllocation(
                name="c",
                devices=(
                    gpu(0, 333, GIB, 1000),
                    DeviceGrant(type="rdma", minor=0, id="mlx5_0", core_milli=1000),
                ),
            ),
        ),
    )
    doc = json.loads(encode_allocation(alloc))
    assert doc["containers"][0]["devices"] == [
        {"type": "gpu", "minor": 0, "id": "", "core": 33.3, "memory": GIB, "memoryRatio": 100},
        {"type": "rdma", "minor": 0, "id": "mlx5_0", "share": 100},
    ]
    assert decode_allocation({names.ALLOCATION: encode_allocation(alloc)}) == alloc


@given(allocations())
def test_canonical_round_trip(alloc: PodAllocation) -> None:
    assert decode_allocation(encode_annotations_canonical(alloc)) == alloc


def encode_annotations_canonical(alloc: PodAllocation) -> dict[str, str]:
    return {names.ALLOCATION: encode_allocation(alloc), "other": "x"}


def test_canonical_absent() -> None:
    assert decode_allocation({}) is None
    assert decode_allocation({koordinator_names.KOORD_DEVICE_ALLOCATED: "{}"}) is None


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "[]",
        "{}",  # node is required
        '{"node": "n", "containers": [{"devices": []}]}',
        '{"node": "n", "containers": [{"name": "c", "devices": [{"type": "gpu", "minor": -1}]}]}',
        '{"node": "n", "containers": [{"name": "c", "devices": [{"type": "gpu", "minor": 0, "core": -5}]}]}',
        '{"node": "n", "containers": [{"name": "c", "devices": [{"type": "gpu", "minor": 0, "memory": "8Gi"}]}]}',
        '{"node": "n", "containers": [{"name": "c", "devices": [{"minor": 0}]}]}',
        '{"node": "n", "containers": [{"name": "c", "devices": [{"type": "gpu", "minor": 0, "core": 1e308}]}]}',
        '{"node": "n", "containers": [{"name": "c", "devices": [{"type": "rdma", "minor": 0, "share": -1}]}]}',
    ],
)
def test_canonical_malformed(text: str) -> None:
    with pytest.raises(InvalidAnnotation) as err:
        decode_allocation({names.ALLOCATION: text})
    assert names.ALLOCATION in str(err.value)
