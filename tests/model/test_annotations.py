"""Allocation annotations: the seeds' examples, round trips, and malformed values."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.model import names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.annotations import encode_annotations
from devshare.model.codecs import decode_allocation, decode_topology, encode_allocation, encode_topology
from devshare.model.dialects import aliyun, koordinator, mgpu, nvidia
from devshare.model.dialects.aliyun import AliyunAllocation, decode_aliyun, encode_aliyun
from devshare.model.dialects.koordinator import decode_koordinator, device_totals, encode_koordinator
from devshare.model.dialects.mgpu import decode_mgpu, encode_mgpu
from devshare.model.errors import InvalidAnnotation
from devshare.model.pod import parse_pod
from devshare.model.quantity import GIB, MIB
from devshare.model.request import PodRequest

# ------------------------------------------------------------------ strategies

gpu_grants = st.builds(
    DeviceGrant,
    type=st.just("gpu"),
    minor=st.integers(0, 15),
    id=st.text(max_size=12),
    core_milli=st.integers(0, 1000),
    memory=st.integers(0, 2**40),
    memory_ratio_milli=st.integers(0, 1000),
)
other_grants = st.builds(
    DeviceGrant,
    type=st.sampled_from(["rdma", "fpga"]),
    minor=st.integers(0, 7),
    id=st.text(max_size=12),
    core_milli=st.integers(0, 1000),
)
container_names = st.from_regex(r"[a-z]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True)


@st.composite
def allocations(draw: st.DrawFn) -> PodAllocation:
    names_ = draw(st.lists(container_names, max_size=4, unique=True))
    containers = tuple(
        ContainerAllocation(name=n, devices=tuple(draw(st.lists(st.one_of(gpu_grants, other_grants), max_size=4))))
        for n in names_
    )
    return PodAllocation(node=draw(st.text(min_size=1, max_size=20)), containers=containers)


def gpu(minor: int, core: int, memory: int, ratio: int, id_: str = "") -> DeviceGrant:
    return DeviceGrant(type="gpu", minor=minor, id=id_, core_milli=core, memory=memory, memory_ratio_milli=ratio)


# ------------------------------------------------------------------ canonical


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
    assert decode_allocation({koordinator.KOORD_DEVICE_ALLOCATED: "{}"}) is None


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


# ------------------------------------------------------------------ Koordinator


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


# ------------------------------------------------------------------ mGPU


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


# ------------------------------------------------------------------ Aliyun


@given(
    st.builds(
        AliyunAllocation,
        minors=st.lists(st.integers(0, 15), min_size=1, max_size=4).map(tuple),
        pod_mib=st.integers(0, 10**6),
        dev_mib=st.one_of(st.none(), st.integers(0, 10**6)),
        assume_time_ns=st.integers(0, 2**63),
        assigned=st.booleans(),
    )
)
def test_aliyun_round_trip(a: AliyunAllocation) -> None:
    assert decode_aliyun(encode_aliyun(a)) == a


def test_aliyun_malformed() -> None:
    assert decode_aliyun({}) is None
    for bad in ({aliyun.ALIYUN_IDX: "x"}, {aliyun.ALIYUN_IDX: "0", aliyun.ALIYUN_POD: "-1"}):
        with pytest.raises(InvalidAnnotation):
            decode_aliyun(bad)
    with pytest.raises(InvalidAnnotation):
        decode_aliyun({aliyun.ALIYUN_IDX: "0", aliyun.ALIYUN_ASSIGNED: "maybe"})


# ------------------------------------------------------------------ topology


def test_topology_seed_example() -> None:
    text = '{"allocatedGPUs":{"0":["4","5"]},"visibleGPUs":["4","5","6","7"]}'
    assert decode_topology({names.TOPOLOGY_GPU: text}) == ({0: [4, 5]}, [4, 5, 6, 7])
    assert encode_topology({0: [4, 5]}, [4, 5, 6, 7]) == {names.TOPOLOGY_GPU: text}
    assert decode_topology({}) is None


@given(
    st.dictionaries(st.integers(0, 8), st.lists(st.integers(0, 15), max_size=4), max_size=4),
    st.lists(st.integers(0, 15), max_size=8),
)
def test_topology_round_trip(allocated: dict[int, list[int]], visible: list[int]) -> None:
    assert decode_topology(encode_topology(allocated, visible)) == (allocated, visible)


@pytest.mark.parametrize(
    "text", ["x", "[]", '{"allocatedGPUs": []}', '{"allocatedGPUs": {"a": ["1"]}}', '{"visibleGPUs": ["-1"]}']
)
def test_topology_malformed(text: str) -> None:
    with pytest.raises(InvalidAnnotation):
        decode_topology({names.TOPOLOGY_GPU: text})


# ------------------------------------------------------------------ encode_annotations


def pod_with(resources: dict[str, Any], annotations: dict[str, str] | None = None) -> Any:
    return parse_pod(
        {
            "metadata": {"name": "p", "annotations": annotations or {}},
            "spec": {"containers": [{"name": "main", "resources": {"limits": resources}}, {"name": "side"}]},
        }
    )


ONE_GPU = PodAllocation(
    node="node-1",
    containers=(
        ContainerAllocation(name="main", devices=(gpu(3, 0, 4000 * MIB, 0, "GPU-3"),)),
        ContainerAllocation(name="side"),
    ),
)


def test_encode_annotations_per_dialect() -> None:
    base = {names.ALLOCATION}
    koord = encode_annotations(pod_with({koordinator.KOORD_GPU: "50"}), ONE_GPU, now_ns=1)
    assert set(koord) == base | {koordinator.KOORD_DEVICE_ALLOCATED}
    nv = encode_annotations(pod_with({nvidia.NVIDIA_GPU: "1"}), ONE_GPU, now_ns=1)
    assert set(nv) == base | {koordinator.KOORD_DEVICE_ALLOCATED}
    mg = encode_annotations(pod_with({mgpu.MGPU_CORE: "50", mgpu.MGPU_MEMORY: "1k"}), ONE_GPU, now_ns=1)
    assert mg == {names.ALLOCATION: encode_allocation(ONE_GPU), **encode_mgpu(ONE_GPU)}
    assert decode_allocation(mg) == ONE_GPU


def test_encode_annotations_aliyun() -> None:
    pod = pod_with({aliyun.ALIYUN_GPU_MEM: "4000"})
    out = encode_annotations(pod, ONE_GPU, now_ns=1_700_000_000_000_000_000, device_memory={3: 16276 * MIB})
    assert out[aliyun.ALIYUN_IDX] == "3"
    assert out[aliyun.ALIYUN_POD] == "4000"
    assert out[aliyun.ALIYUN_DEV] == "16276"
    assert out[aliyun.ALIYUN_ASSUME_TIME] == "1700000000000000000"
    assert out[aliyun.ALIYUN_ASSIGNED] == "false"
    assert aliyun.ALIYUN_DEV not in encode_annotations(pod, ONE_GPU, now_ns=1)


def test_encode_annotations_topology() -> None:
    out = encode_annotations(pod_with({nvidia.NVIDIA_GPU: "1"}), ONE_GPU, now_ns=1, visible_gpus=[2, 3])
    assert decode_topology(out) == ({0: [3]}, [2, 3])
    assert names.TOPOLOGY_GPU not in encode_annotations(pod_with({nvidia.NVIDIA_GPU: "1"}), ONE_GPU, now_ns=1)


def test_no_dialect_annotation_without_grants() -> None:
    empty = PodAllocation(node="n", containers=(ContainerAllocation(name="main"), ContainerAllocation(name="side")))
    assert set(encode_annotations(pod_with({mgpu.MGPU_CORE: "100"}), empty, now_ns=1)) == {names.ALLOCATION}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=12,
)
ANNOTATION_KEYS = [
    names.ALLOCATION,
    koordinator.KOORD_DEVICE_ALLOCATED,
    names.TOPOLOGY_GPU,
    mgpu.MGPU_ASSUMED,
    mgpu.MGPU_INDEX_PREFIX + "c",
    aliyun.ALIYUN_IDX,
    aliyun.ALIYUN_POD,
    aliyun.ALIYUN_DEV,
    aliyun.ALIYUN_ASSUME_TIME,
    aliyun.ALIYUN_ASSIGNED,
]


@given(st.dictionaries(st.sampled_from(ANNOTATION_KEYS), st.one_of(st.text(max_size=20), json_values.map(json.dumps))))
def test_decoders_raise_only_invalid_annotation(annotations: dict[str, str]) -> None:
    for decode in (decode_allocation, decode_koordinator, decode_topology, decode_mgpu, decode_aliyun):
        with contextlib.suppress(InvalidAnnotation):
            decode(annotations)


@given(allocations(), st.sampled_from(["koordinator", "nvidia", "mgpu", "aliyun"]), st.booleans())
def test_encode_annotations_round_trip(alloc: PodAllocation, dialect: str, topology: bool) -> None:
    """Whatever the dialect, the canonical annotation gives the allocation back, and the dialect's
    own annotation agrees with it."""
    pod = PodRequest(namespace="ns", name="p", dialect=dialect)
    visible = sorted(set(alloc.minors("gpu"))) if topology else None
    out = encode_annotations(pod, alloc, now_ns=5, visible_gpus=visible)
    assert decode_allocation(out) == alloc
    if not alloc.grants() or (dialect in ("mgpu", "aliyun") and not alloc.minors("gpu")):
        assert set(out) - {names.TOPOLOGY_GPU} == {names.ALLOCATION}
    elif dialect in ("koordinator", "nvidia"):
        assert decode_koordinator(out) == device_totals(alloc)
    elif dialect == "mgpu":
        assert decode_mgpu(out) == {
            c.name: [g.minor for g in c.devices if g.type == "gpu"]
            for c in alloc.containers
            if any(g.type == "gpu" for g in c.devices)
        }
    else:
        a = decode_aliyun(out)
        assert a is not None and list(a.minors) == alloc.minors("gpu") and a.assume_time_ns == 5 and not a.assigned
    if topology:
        decoded = decode_topology(out)
        assert decoded is not None and decoded[1] == visible
        assert [m for ms in decoded[0].values() for m in ms] == [g.minor for _, g in alloc.grants() if g.type == "gpu"]
