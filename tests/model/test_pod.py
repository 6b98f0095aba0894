"""Pod-level fields: identity, GPU models, priority, groups and gangs, node resources, init
containers, spec.nodeName, compute policy, GPU selection."""

from __future__ import annotations

from typing import Any

import pytest

from devshare.model import names
from devshare.model.dialects import nvidia
from devshare.model.dialects.koordinator_names import KOORD_GPU
from devshare.model.errors import InvalidRequest
from devshare.model.pod import parse_pod, validate_pod
from devshare.model.request import GroupRef

GPU50 = {KOORD_GPU: "50"}


def pod(
    *resources: dict[str, Any],
    annotations: dict[str, Any] | None = None,
    labels: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "resources": {"requests": dict(r)}} for i, r in enumerate(resources)]
    meta: dict[str, Any] = {"name": "p", "namespace": "team", "uid": "u-1"}
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    return {"metadata": meta, "spec": {"containers": containers, **spec}}


def problems_of(p: dict[str, Any]) -> list[str]:
    found = validate_pod(p)
    if found:
        with pytest.raises(InvalidRequest):
            parse_pod(p)
    return found


def test_identity() -> None:
    req = parse_pod(pod(GPU50))
    assert (req.namespace, req.name, req.uid, req.key) == ("team", "p", "u-1", "team/p")
    req = parse_pod({"metadata": {"generateName": "job-"}, "spec": {"containers": []}})
    assert (req.namespace, req.name, req.containers) == ("default", "job-", ())


def test_one_container_request_per_container_in_order() -> None:
    req = parse_pod(pod({"cpu": "1"}, GPU50, {}))
    assert [c.name for c in req.containers] == ["c0", "c1", "c2"]
    assert [bool(c.devices) for c in req.containers] == [False, True, False]


# --- GPU models


def test_gpu_models_from_annotation() -> None:
    assert parse_pod(pod(GPU50, annotations={names.POD_GPU_MODEL: "A100|H100"})).gpu_models == ("A100", "H100")
    assert parse_pod(pod(GPU50, annotations={names.POD_GPU_MODEL: "A100, H100"})).gpu_models == ("A100", "H100")
    (msg,) = problems_of(pod(GPU50, annotations={names.POD_GPU_MODEL: " | "}))
    assert "is empty" in msg


def test_gpu_models_from_node_selector_and_affinity() -> None:
    assert parse_pod(pod(GPU50, nodeSelector={names.NODE_GPU_MODEL: "V100"})).gpu_models == ("V100",)
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": names.NODE_GPU_MODEL, "operator": "In", "values": ["A100"]}]},
                    {"matchExpressions": [{"key": names.NODE_GPU_MODEL, "operator": "In", "values": ["H100"]}]},
                ]
            }
        }
    }
    assert parse_pod(pod(GPU50, affinity=affinity)).gpu_models == ("A100", "H100")
    # a term that does not constrain the model lets any model through
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    terms.append({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]})
    assert parse_pod(pod(GPU50, affinity=affinity)).gpu_models == ()


def test_gpu_model_sources_must_agree() -> None:
    p = pod(GPU50, annotations={names.POD_GPU_MODEL: "A100|H100"}, nodeSelector={names.NODE_GPU_MODEL: "H100"})
    assert parse_pod(p).gpu_models == ("H100",)
    p["spec"]["nodeSelector"][names.NODE_GPU_MODEL] = "V100"
    (msg,) = problems_of(p)
    assert "no GPU model is allowed" in msg and "V100" in msg


# --- priority, compute policy


def test_priority() -> None:
    assert parse_pod(pod(GPU50)).priority == 0
    assert parse_pod(pod(GPU50, priority=1000)).priority == 1000
    (msg,) = problems_of(pod(GPU50, priority="high"))
    assert msg.startswith("spec.priority: ")


def test_compute_policy() -> None:
    for policy in names.COMPUTE_POLICIES:
        assert parse_pod(pod(GPU50, annotations={names.COMPUTE_POLICY: policy})).compute_policy == policy
    assert parse_pod(pod(GPU50)).compute_policy is None
    (msg,) = problems_of(pod(GPU50, annotations={names.COMPUTE_POLICY: "burst"}))
    assert "fixed-share" in msg and "'burst'" in msg


# --- groups and gangs (seed 003)


def test_group_from_labels_and_gang() -> None:
    labels = {names.GROUP_NAME: "job", names.GROUP_REPLICA: "4"}
    assert parse_pod(pod(GPU50, labels=labels)).group == GroupRef(name="job", replicas=4)
    ann = {names.GANG_NAME: "job", names.GANG_MIN_AVAILABLE: "4"}
    assert parse_pod(pod(GPU50, labels=labels, annotations=ann)).group == GroupRef(
        name="job", replicas=4, gang_name="job", min_available=4
    )
    # a gang alone is a group of that name and size
    assert parse_pod(pod(GPU50, annotations=ann)).group == GroupRef(
        name="job", replicas=4, gang_name="job", min_available=4
    )
    assert parse_pod(pod(GPU50)).group is None


def test_group_and_gang_must_agree() -> None:
    labels = {names.GROUP_NAME: "job", names.GROUP_REPLICA: "4"}
    found = problems_of(
        pod(GPU50, labels=labels, annotations={names.GANG_NAME: "other", names.GANG_MIN_AVAILABLE: "3"})
    )
    assert len(found) == 2
    assert "must be the same" in found[0] and "'other'" in found[0]
    assert "min-available=3" in found[1]


def test_group_incomplete_or_bad_count() -> None:
    (msg,) = problems_of(pod(GPU50, labels={names.GROUP_NAME: "job"}))
    assert names.GROUP_REPLICA in msg and "set both" in msg
    (msg,) = problems_of(pod(GPU50, labels={names.GROUP_NAME: "job", names.GROUP_REPLICA: "two"}))
    assert "not a whole number" in msg
    (msg,) = problems_of(pod(GPU50, annotations={names.GANG_NAME: "j", names.GANG_MIN_AVAILABLE: "0"}))
    assert "1 or more" in msg


# --- node resources, init containers


def test_gang_keys_as_labels_are_refused_with_the_fix() -> None:
    """Issue 40: gang keys written as labels placed two of three members with no warning. They are
    refused, saying to use annotations (and group keys written as annotations, to use labels)."""
    gang_as_labels = {names.GANG_NAME: "job", names.GANG_MIN_AVAILABLE: "3"}
    msgs = problems_of(pod(GPU50, labels=gang_as_labels))
    assert len(msgs) == 2
    assert all("is a label here, but gang keys are read from annotations: move it to metadata.annotations" in m
               for m in msgs)
    with pytest.raises(InvalidRequest, match="gang keys are read from annotations"):
        parse_pod(pod(GPU50, labels=gang_as_labels))
    group_as_annotations = {names.GROUP_NAME: "job", names.GROUP_REPLICA: "3"}
    (msg, _) = problems_of(pod(GPU50, annotations=group_as_annotations))
    assert "group keys are read from labels: move it to metadata.labels" in msg
    # written in both places (some tools copy labels to annotations): read as usual
    both = parse_pod(pod(GPU50, labels=gang_as_labels, annotations=gang_as_labels))
    assert both.group == GroupRef(name="job", replicas=3, gang_name="job", min_available=3)


def test_cpu_and_memory_sum_with_init_containers() -> None:
    p = pod({"cpu": "500m", "memory": "1Gi"}, {"cpu": "1.5", "memory": "512Mi"})
    req = parse_pod(p)
    assert (req.cpu_milli, req.memory_bytes) == (2000, 1536 * 2**20)
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "4"}}}]
    assert parse_pod(p).cpu_milli == 4000  # Kubernetes counts the larger of the two
    (msg,) = problems_of(pod({"cpu": "lots"}))
    assert "cpu" in msg and "container 'c0'" in msg


def test_init_container_asking_for_devices_is_read_as_kubelet_gives_them() -> None:
    p = pod(GPU50)
    p["spec"]["initContainers"] = [{"name": "warmup", "resources": {"limits": {nvidia.NVIDIA_GPU: "1"}}},
                                   {"name": "side", "restartPolicy": "Always", "resources": {"limits": {"cpu": "1"}}}]
    assert problems_of(p) == []
    req = parse_pod(p)
    assert [c.name for c in req.init_containers] == ["warmup", "side"]
    assert req.init_containers[0].devices[0].count == 1 and req.init_containers[1].restartable
    p["spec"]["initContainers"] = [{"name": "warmup", "resources": {"limits": {"cpu": "1"}}}]
    assert problems_of(p) == [] and parse_pod(p).init_containers == ()


def test_init_container_refused_only_where_the_node_side_cannot_serve_it() -> None:
    p = pod({"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "1000"})
    p["spec"]["initContainers"] = [{"name": "warmup", "resources": {"limits": {"volcano.sh/vgpu-number": "1"}}}]
    (msg,) = problems_of(p)
    assert "init container 'warmup'" in msg and "spec.containers" in msg and "volcano-vgpu" in msg


# --- spec.nodeName (admission only)


def test_node_name_with_devices_is_refused_at_admission() -> None:
    p = pod(GPU50, nodeName="node-1")
    (msg,) = validate_pod(p)
    assert "bypasses the scheduler" in msg and "kubernetes.io/hostname" in msg
    # parse_pod still reads it: bound pods carry spec.nodeName
    assert parse_pod(p).has_devices()
    # a pod that already carries its allocation (restored) is accepted, so is one asking nothing
    p["metadata"]["annotations"] = {names.ALLOCATION: "{}"}
    assert validate_pod(p) == []
    assert validate_pod(pod({"cpu": "1"}, nodeName="node-1")) == []


# --- malformed pods


@pytest.mark.parametrize(
    ("p", "needle"),
    [
        ([], "a Pod must be a mapping"),
        ({"metadata": [], "spec": {}}, "metadata"),
        ({"spec": {"containers": {}}}, "spec.containers"),
        ({"spec": {"containers": [1]}}, "spec.containers[0]"),
        ({"spec": {"containers": [{"resources": {}}]}}, "name is missing"),
        ({"spec": {"containers": [{"name": "a", "resources": {"requests": []}}]}}, "resources.requests"),
        ({"metadata": {"annotations": "x"}, "spec": {}}, "metadata.annotations"),
    ],
)
def test_malformed(p: Any, needle: str) -> None:
    found = validate_pod(p)
    assert any(needle in m for m in found), found
    with pytest.raises(InvalidRequest):
        parse_pod(p)


def test_several_problems_in_one_error() -> None:
    p = pod({KOORD_GPU: "150"}, {nvidia.NVIDIA_GPU: "-1"})
    assert len(validate_pod(p)) == 2
    with pytest.raises(InvalidRequest, match=r"2 problems: container 'c0': .*; container 'c1': "):
        parse_pod(p)


def _selected(annotations: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "p", "annotations": annotations},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def test_gpu_selection_annotations_are_read_as_hami_writes_them() -> None:
    from devshare.model.request import GpuSelection

    req = parse_pod(_selected({"nvidia.com/use-gpuuuid": "GPU-a, GPU-b", "nvidia.com/nouse-gputype": "T4,V100",
                               "nvidia.com/use-gputype": "NVIDIA A10"}))
    assert req.gpu_selection == GpuSelection(use_ids=("GPU-a", "GPU-b"), use_types=("NVIDIA A10",),
                                             avoid_types=("T4", "V100"))
    assert parse_pod(_selected({})).gpu_selection is None
    assert req.gpu_selection is not None and req.gpu_selection.allows("GPU-a", "NVIDIA A100-PCIE-40GB")
    assert not req.gpu_selection.allows("GPU-c", "NVIDIA A100-PCIE-40GB")


@pytest.mark.parametrize(("annotations", "problem"), [
    ({"nvidia.com/use-gpuuuid": ""}, "annotation nvidia.com/use-gpuuuid: is empty: list the GPU ids"),
    ({"nvidia.com/nouse-gputype": " , "}, "annotation nvidia.com/nouse-gputype: is empty: list the GPU types"),
    ({"nvidia.com/use-gputype": "A100,,H100"}, "has an empty entry in 'A100,,H100'"),
    ({"nvidia.com/nouse-gpuuuid": "GPU-a,"}, "has an empty entry in 'GPU-a,'"),
    ({"nvidia.com/use-gpuuuid": "GPU-a GPU-b"}, "has a space inside an id in 'GPU-a GPU-b'"),
    ({"nvidia.com/use-gpuuuid": "GPU-a", "nvidia.com/nouse-gpuuuid": "GPU-b,GPU-a"},
     "GPU selection: GPU-a is listed in both nvidia.com/use-gpuuuid and nvidia.com/nouse-gpuuuid"),
    ({"nvidia.com/use-gputype": "a100", "nvidia.com/nouse-gputype": "A100"},
     "a100 is listed in both nvidia.com/use-gputype and nvidia.com/nouse-gputype"),
])
def test_gpu_selection_syntax_is_checked(annotations: dict[str, str], problem: str) -> None:
    problems = validate_pod(_selected(annotations))
    assert len(problems) == 1 and problem in problems[0], problems
