"""Random pods, well-formed or not: parse_pod raises only InvalidInput (a message for a person),
validate_pod never raises, and both agree."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from devshare.model import dialects, names
from devshare.model.dialects import aliyun, mgpu, nvidia
from devshare.model.dialects.koordinator_names import KOORD_GPU, KOORD_GPU_CORE, KOORD_GPU_MEMORY_RATIO, KOORD_RDMA
from devshare.model.errors import InvalidInput
from devshare.model.pod import parse_pod, read_pod, validate_pod
from devshare.model.podresources import requests_devices
from devshare.model.request import WHOLE

RESOURCE_NAMES = [*dialects.resource_names(), "cpu", "memory", "example.com/foo"]
ANNOTATION_KEYS = [
    mgpu.MGPU_MULTIPLE,
    names.COMPUTE_POLICY,
    names.POD_GPU_MODEL,
    names.GANG_NAME,
    names.GANG_MIN_AVAILABLE,
    names.ALLOCATION,
]
LABEL_KEYS = [names.GROUP_NAME, names.GROUP_REPLICA]

garbage = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
quantity = st.one_of(
    st.integers(min_value=-300, max_value=100_000).map(str),
    st.sampled_from(["50", "100", "200", "6k", "16Gi", "500m", "1.5", "2e3", "-20", "0", "256", "abc"]),
    st.integers(min_value=-300, max_value=1000),
    garbage,
)
resources = st.dictionaries(st.sampled_from(RESOURCE_NAMES), quantity, max_size=4)
resource_block = st.one_of(
    st.fixed_dictionaries({}, optional={"requests": resources, "limits": resources}),
    garbage,
)
container = st.one_of(
    st.fixed_dictionaries(
        {"name": st.one_of(st.sampled_from(["a", "b", "main"]), garbage)}, optional={"resources": resource_block}
    ),
    garbage,
)
text_value = st.one_of(
    st.sampled_from(["2,1", "1", "-1,2", "x", "", "A100|H100", "native-burst-share", "job", "3", "0"]),
    garbage,
)
metadata = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.just("p"), garbage),
        "namespace": st.one_of(st.just("ns"), garbage),
        "annotations": st.one_of(st.dictionaries(st.sampled_from(ANNOTATION_KEYS), text_value, max_size=3), garbage),
        "labels": st.one_of(st.dictionaries(st.sampled_from(LABEL_KEYS), text_value, max_size=2), garbage),
    },
)
spec = st.fixed_dictionaries(
    {},
    optional={
        "containers": st.one_of(st.lists(container, max_size=4), garbage),
        "initContainers": st.one_of(st.lists(container, max_size=2), garbage),
        "priority": st.one_of(st.integers(), garbage),
        "nodeName": st.one_of(st.just("node-1"), garbage),
        "nodeSelector": st.one_of(st.dictionaries(st.just(names.NODE_GPU_MODEL), text_value, max_size=1), garbage),
        "affinity": garbage,
    },
)
pods = st.one_of(st.fixed_dictionaries({}, optional={"metadata": st.one_of(metadata, garbage), "spec": spec}), garbage)


@settings(max_examples=400, deadline=None)
@given(pods)
def test_random_pods(pod: Any) -> None:
    request, problems = read_pod(pod)  # never raises
    found = validate_pod(pod)  # never raises
    assert all(isinstance(m, str) and m for m in found)
    assert set(problems.messages()) <= set(found)  # validation adds admission-only rules
    try:
        parsed = parse_pod(pod)
    except InvalidInput as e:
        assert problems and str(e)
        return
    assert not problems and parsed == request
    # what a parsed request may hold
    for c in parsed.containers:
        for d in c.devices:
            assert d.count >= 1
            assert 0 <= d.core_milli <= WHOLE and 0 <= d.memory_ratio_milli <= WHOLE and d.memory >= 0
            assert d.core_milli or d.memory or d.memory_ratio_milli
    if parsed.has_devices():
        assert requests_devices(pod)  # the fast path never lets a device request through
    assert parsed.dialect in ("koordinator", "nvidia", "mgpu", "aliyun")


DIALECT_NAMES = {
    "koordinator": [KOORD_GPU, KOORD_GPU_CORE, KOORD_GPU_MEMORY_RATIO, KOORD_RDMA],
    "nvidia": [nvidia.NVIDIA_GPU],
    "mgpu": [mgpu.MGPU_CORE, mgpu.MGPU_MEMORY],
    "aliyun": [aliyun.ALIYUN_GPU_MEM, aliyun.ALIYUN_GPU_COUNT],
}


@st.composite
def plausible_pods(draw: st.DrawFn) -> dict[str, Any]:
    """Pods in one dialect with sensible-looking values: many are valid."""
    dialect = draw(st.sampled_from(sorted(DIALECT_NAMES)))
    value = st.sampled_from([25, 50, 100, 200, 300, 256, 1000, 6000])
    n = draw(st.integers(min_value=1, max_value=3))
    containers = [
        {
            "name": f"c{i}",
            "resources": {"limits": draw(st.dictionaries(st.sampled_from(DIALECT_NAMES[dialect]), value.map(str)))},
        }
        for i in range(n)
    ]
    annotations = {}
    if dialect == "mgpu" and draw(st.booleans()):
        annotations[mgpu.MGPU_MULTIPLE] = ",".join(str(draw(st.integers(1, 3))) for _ in range(n))
    return {"metadata": {"name": "p", "annotations": annotations}, "spec": {"containers": containers}}


@settings(max_examples=300, deadline=None)
@given(plausible_pods())
def test_plausible_pods(pod: dict[str, Any]) -> None:
    request, problems = read_pod(pod)
    assert request is not None
    assert validate_pod(pod) == problems.messages()
    if problems:
        return
    assert request.dialect in (pod_dialects(pod) or {"koordinator"})
    for c, raw in zip(request.containers, pod["spec"]["containers"], strict=True):
        asked = any(v != "0" for v in raw["resources"]["limits"].values())
        assert bool(c.devices) == asked
        for d in c.devices:
            assert d.count >= 1 and 0 <= d.core_milli <= WHOLE and 0 <= d.memory_ratio_milli <= WHOLE
    assert requests_devices(pod) == request.has_devices()


def pod_dialects(pod: dict[str, Any]) -> set[str]:
    keys = {k for c in pod["spec"]["containers"] for k in c["resources"]["limits"]}
    return {d for d, ns in DIALECT_NAMES.items() if keys & set(ns)}
