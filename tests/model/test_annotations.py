"""Every annotation a scheduled pod gets (:mod:`devshare.model.annotations`): per dialect, with the
topology one, round trips, and decoders that raise only InvalidAnnotation."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from devshare.model import names
from devshare.model.allocation import ContainerAllocation, PodAllocation
from devshare.model.annotations import encode_annotations
from devshare.model.codecs import decode_allocation, decode_topology, encode_allocation
from devshare.model.dialects import aliyun, koordinator_names, mgpu, nvidia
from devshare.model.dialects.aliyun import decode_aliyun
from devshare.model.dialects.koordinator_annotation import decode_koordinator, device_totals
from devshare.model.dialects.mgpu import decode_mgpu, encode_mgpu
from devshare.model.errors import InvalidAnnotation
from devshare.model.pod import parse_pod
from devshare.model.quantity import MIB
from devshare.model.request import PodRequest
from support.allocations import allocations, gpu

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
    koord = encode_annotations(pod_with({koordinator_names.KOORD_GPU: "50"}), ONE_GPU, now_ns=1)
    assert set(koord) == base | {koordinator_names.KOORD_DEVICE_ALLOCATED}
    nv = encode_annotations(pod_with({nvidia.NVIDIA_GPU: "1"}), ONE_GPU, now_ns=1)
    assert set(nv) == base | {koordinator_names.KOORD_DEVICE_ALLOCATED}
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
    koordinator_names.KOORD_DEVICE_ALLOCATED,
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
