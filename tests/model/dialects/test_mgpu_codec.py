"""The mGPU dialect's annotation codec (``gpu-index-container-*``, ``assumed``): the seed's example,
order, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given

from devshare.model.allocation import ContainerAllocation, PodAllocation
from devshare.model.dialects import mgpu
from devshare.model.dialects.mgpu import decode_mgpu, encode_mgpu
from devshare.model.errors import InvalidAnnotation
from devshare.model.quantity import GIB
from support.allocations import allocations, gpu


def test_mgpu_seed_example() -> None:
    alloc = PodAllocation(
        node="n",
        containers=(
            ContainerAllocation(name="c1", devices=(gpu(1, 500, GIB, 0),)),
            ContainerAllocation(name="c2", devices=(gpu(2, 500, GIB, 0), gpu(3, 500, GIB, 0))),
            ContainerAllocation(name="c3", devices=tuple(gpu(m, 300, GIB, 0) for m in (1, 2, 3))),
            ContainerAllocation(name="sidecar"),
        ),
    )
    annotations = encode_mgpu(alloc)
    assert annotations == {
        "vke.volcengine.com/assumed": "true",
        "vke.volcengine.com/gpu-index-container-c1": "1",
        "vke.volcengine.com/gpu-index-container-c2": "2,3",
        "vke.volcengine.com/gpu-index-container-c3": "1,2,3",
    }
    assert decode_mgpu(annotations) == {"c1": [1], "c2": [2, 3], "c3": [1, 2, 3]}


def test_mgpu_order_is_kept() -> None:
    # seed 000: container 0 uses GPU cards 0 and 1, written "1,0"
    assert decode_mgpu({"vke.volcengine.com/gpu-index-container-0": "1,0"}) == {"0": [1, 0]}
    assert decode_mgpu({}) is None
    assert decode_mgpu({mgpu.MGPU_ASSUMED: "true"}) == {}
    for bad in ("", "1,,2", "a", "-1"):
        with pytest.raises(InvalidAnnotation):
            decode_mgpu({mgpu.MGPU_INDEX_PREFIX + "c": bad})


@given(allocations())
def test_mgpu_round_trip(alloc: PodAllocation) -> None:
    expected = {c.name: [g.minor for g in c.devices if g.type == "gpu"] for c in alloc.containers}
    assert decode_mgpu(encode_mgpu(alloc)) == {k: v for k, v in expected.items() if v}


def test_schedule_mode_id_writes_the_gpus_uuids() -> None:
    """Seed 000's MGPUScheduleMode: id (scheduling.scheduleMode: id): the same annotations, the GPUs
    named by the UUIDs of the Device object; a GPU without one by its index."""
    import msgspec

    alloc = PodAllocation(node="n", containers=(
        ContainerAllocation(name="c1", devices=(msgspec.structs.replace(gpu(1, 500, GIB, 0), id="GPU-aaa"),
                                                msgspec.structs.replace(gpu(0, 500, GIB, 0), id="GPU-bbb"))),
        ContainerAllocation(name="c2", devices=(msgspec.structs.replace(gpu(2, 500, GIB, 0), id=""),)),
    ))
    by_id = encode_mgpu(alloc, "id")
    assert by_id == {"vke.volcengine.com/assumed": "true",
                     "vke.volcengine.com/gpu-index-container-c1": "GPU-aaa,GPU-bbb",
                     "vke.volcengine.com/gpu-index-container-c2": "2"}
    assert mgpu.decode_mgpu_devices(by_id) == {"c1": ["GPU-aaa", "GPU-bbb"], "c2": ["2"]}
    assert mgpu.decode_mgpu_devices(encode_mgpu(alloc)) == {"c1": ["1", "0"], "c2": ["2"]}
    assert mgpu.decode_mgpu_devices({}) is None
