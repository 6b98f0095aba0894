"""The pod-level rules, one function each: None (or nothing) when the value is fine, otherwise a
sentence saying what is wrong and how to fix it. parse_pod's own tests (test_pod.py) show them in place."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.model import names
from devshare.model.request import ContainerRequest, DeviceRequest
from devshare.model.validation import (
    compute_policy,
    group_complete,
    group_consistent,
    group_keys_misplaced,
    init_container_devices,
    multi_share_policy,
    node_name_bypass,
    one_card_per_pod,
    one_dialect,
    positive_int_text,
    selection_list,
    selection_overlap,
)


def test_one_dialect() -> None:
    assert one_dialect([], "pod") is None
    assert one_dialect(["hami", "hami"], "container") is None
    assert one_dialect(["nvidia", "aliyun", "nvidia"], "container") == (
        "the container asks for devices in several dialects (aliyun, nvidia), whose allocations are written "
        "differently: use one of them for the whole container")


def test_init_container_devices() -> None:
    assert init_container_devices("volcano-vgpu", ["volcano.sh/vgpu-number", "volcano.sh/vgpu-memory"]) == (
        "init container asks for volcano.sh/vgpu-number, volcano.sh/vgpu-memory: the volcano-vgpu node side gives "
        "devices to app containers only; move the request to a container in spec.containers")


def test_one_card_per_pod() -> None:
    gpu = (DeviceRequest(type="gpu", memory=2**30),)
    two = [ContainerRequest(name="a", devices=gpu), ContainerRequest(name="b", devices=gpu),
           ContainerRequest(name="idle")]
    per_pod = SimpleNamespace(one_card_per_pod=True)
    assert one_card_per_pod("volcano-gpushare", per_pod, two) == (
        "containers 'a', 'b' each ask for a card, but volcano-gpushare records one card for the whole pod: ask for "
        "the memory in one container")
    assert one_card_per_pod("hami", SimpleNamespace(one_card_per_pod=False), two) is None
    assert one_card_per_pod("x", None, two) is None
    assert one_card_per_pod("volcano-gpushare", per_pod, two[:1]) is None
    sidecar = ContainerRequest(name="s", devices=gpu, restartable=True)
    assert one_card_per_pod("volcano-gpushare", per_pod, [two[0], sidecar]) is None


def test_node_name_bypass() -> None:
    assert node_name_bypass("n1", True, False) == (
        "is set to 'n1', which bypasses the scheduler, so no device would be allocated: remove spec.nodeName and "
        "pin the node with a nodeSelector on kubernetes.io/hostname")
    assert node_name_bypass("n1", False, False) is None  # no devices: nothing to allocate
    assert node_name_bypass("n1", True, True) is None  # already allocated (a pod devshare bound)
    assert node_name_bypass("", True, False) is None and node_name_bypass(None, True, False) is None


def test_compute_policy() -> None:
    assert all(compute_policy(p) is None for p in (None, *names.COMPUTE_POLICIES))
    assert compute_policy("fast") == (
        f"annotation {names.COMPUTE_POLICY}='fast' is not a compute policy: use one of fixed-share, "
        "guaranteed-burst-share, native-burst-share, or remove it to fit any node")


def test_multi_share_policy() -> None:
    assert multi_share_policy("fixed-share", True) == (
        f"a container spreads a share over several GPUs, which needs the native-burst-share compute policy, but "
        f"annotation {names.COMPUTE_POLICY} asks for 'fixed-share': set it to native-burst-share or remove it")
    assert multi_share_policy("fixed-share", False) is None
    assert multi_share_policy(None, True) is None
    assert multi_share_policy("native-burst-share", True) is None


@pytest.mark.parametrize(("value", "want"), [("4", 4), (" 12 ", 12), (3, 3), ("007", 7)])
def test_positive_int_text_reads_a_count(value: object, want: int) -> None:
    assert positive_int_text("k", value) == (want, None)


@pytest.mark.parametrize(("value", "problem"), [
    ("four", "k='four' is not a whole number: write the number of pods, e.g. \"4\""),
    ("1.5", "k='1.5' is not a whole number: write the number of pods, e.g. \"4\""),
    ("", "k='' is not a whole number: write the number of pods, e.g. \"4\""),
    ("0", "k='0' must be 1 or more"),
    ("-2", "k='-2' must be 1 or more"),
])
def test_positive_int_text_refuses_what_is_no_count(value: str, problem: str) -> None:
    assert positive_int_text("k", value) == (None, problem)


@given(st.text(max_size=8))
def test_positive_int_text_is_a_count_or_a_problem(value: str) -> None:
    n, problem = positive_int_text("k", value)
    assert (n is None) != (problem is None)
    assert n is None or n >= 1


def test_group_and_gang_must_agree() -> None:
    assert group_consistent("job", 4, "job", 4) == []
    assert group_consistent("job", 4, None, None) == []
    assert group_consistent("a", 4, "b", 2) == [
        f"label {names.GROUP_NAME}='a' and annotation {names.GANG_NAME}='b' must be the same: give both the job's name",
        f"label {names.GROUP_REPLICA}=4 and annotation {names.GANG_MIN_AVAILABLE}=2 must be the same: both are the "
        "job's number of pods"]


def test_group_keys_in_the_wrong_place() -> None:
    assert group_keys_misplaced({names.GROUP_NAME: "j"}, {names.GANG_NAME: "j"}) == []
    assert group_keys_misplaced({names.GANG_NAME: "j"}, {names.GROUP_REPLICA: "2"}) == [
        f"{names.GANG_NAME} is a label here, but gang keys are read from annotations: move it to "
        "metadata.annotations (as a label it would be ignored and the pod placed alone)",
        f"{names.GROUP_REPLICA} is an annotation here, but group keys are read from labels: move it to "
        "metadata.labels (as an annotation it would be ignored and the pod placed alone)"]
    # written in both places: the right one is read, nothing is ignored
    assert group_keys_misplaced({names.GANG_NAME: "j"}, {names.GANG_NAME: "j"}) == []


def test_group_complete() -> None:
    assert group_complete("j", "2", "name", "count") is None
    assert group_complete(None, None, "name", "count") is None
    assert group_complete("j", None, "name", "count") == (
        "name is set but count is not: set both (the job's name and its number of pods)")
    assert group_complete(None, "2", "name", "count") == (
        "count is set but name is not: set both (the job's name and its number of pods)")


def test_selection_list() -> None:
    assert selection_list(names.GPU_USE_UUID, " GPU-a, GPU-b ,GPU-a") == (("GPU-a", "GPU-b"), None)
    assert selection_list(names.GPU_USE_TYPE, "NVIDIA A10") == (("NVIDIA A10",), None)  # a type may hold a space
    assert selection_list(names.GPU_USE_UUID, " , ") == ((), (
        "is empty: list the GPU ids, comma-separated (e.g. GPU-98583a5c-c155-9cf6-f955-03c189d3dbfb), or remove it"))
    assert selection_list(names.GPU_NOUSE_TYPE, "") == ((), (
        "is empty: list the GPU types, comma-separated (e.g. A100,H100), or remove it"))
    assert selection_list(names.GPU_USE_TYPE, "A100,,H100") == (
        (), "has an empty entry in 'A100,,H100': separate the entries with single commas")
    assert selection_list(names.GPU_USE_UUID, "GPU-a GPU-b") == (
        (), "has a space inside an id in 'GPU-a GPU-b': GPU ids (UUIDs) hold no spaces")


def test_selection_overlap() -> None:
    assert selection_overlap("type", ("A100",), ("T4",)) is None
    assert selection_overlap("type", ("a100", "T4", "H100"), ("A100", "h100")) == (
        "a100, H100 is listed in both nvidia.com/use-gputype and nvidia.com/nouse-gputype: keep it in one of them")
