"""What devshare reads from a Node: its labels (GPU model, compute policy, multi-GPU share), whether it
is schedulable, and its CPU and memory when they are tracked; a malformed Node is refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from devshare.model import names
from devshare.model.errors import InvalidInput
from devshare.model.node import NodeInfo, node_info_from_labels, parse_node


def test_labels_read_into_the_node() -> None:
    n = node_info_from_labels("n1", {names.NODE_GPU_MODEL: "A100", names.COMPUTE_POLICY: "fixed-share",
                                     names.MULTI_GPU_SHARE: "True"}, cpu_milli=4000, memory_bytes=2**33)
    assert n == NodeInfo(name="n1", labels=n.labels, gpu_model="A100", compute_policy="fixed-share",
                         multi_gpu_share=True, cpu_milli=4000, memory_bytes=2**33)
    plain = node_info_from_labels("n2")
    assert (plain.gpu_model, plain.compute_policy, plain.multi_gpu_share, plain.labels) == ("", None, False, {})
    assert not node_info_from_labels("n3", {names.MULTI_GPU_SHARE: "yes"}).multi_gpu_share


def test_the_labels_given_are_copied() -> None:
    labels = {"a": "b"}
    n = node_info_from_labels("n", labels)
    labels["a"] = "changed"
    assert n.labels == {"a": "b"}


def test_an_unknown_compute_policy_is_refused_with_the_ones_there_are() -> None:
    with pytest.raises(InvalidInput) as err:
        node_info_from_labels("n1", {names.COMPUTE_POLICY: "best-effort"})
    assert str(err.value) == (f"Node n1: label {names.COMPUTE_POLICY}='best-effort' is not one of fixed-share, "
                              "guaranteed-burst-share, native-burst-share")


def node(**parts: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"zone": 3}}, **parts}


def test_parse_node() -> None:
    n = parse_node(node(spec={"unschedulable": True}, status={"allocatable": {"cpu": "8", "memory": "16Gi"}}))
    assert (n.name, n.labels, n.unschedulable, n.cpu_milli, n.memory_bytes) == ("n1", {"zone": "3"}, True, 0, 0)
    tracked = parse_node(node(status={"allocatable": {"cpu": "7500m", "memory": "16Gi"}}), track_resources=True)
    assert (tracked.cpu_milli, tracked.memory_bytes, tracked.unschedulable) == (7500, 16 * 2**30, False)
    assert parse_node(node(status={"allocatable": {"cpu": "2"}}), track_resources=True).memory_bytes == 0


@pytest.mark.parametrize(("obj", "message"), [
    ([], "a Node must be a mapping with metadata"),
    ({"metadata": {}}, "Node: metadata.name is missing"),
    ({"metadata": {"name": ""}}, "Node: metadata.name is missing"),
    ({"metadata": "n1"}, "Node: metadata.name is missing"),
    ({"metadata": {"name": "n1", "labels": ["a"]}}, "Node n1: metadata.labels must be a mapping"),
])
def test_a_malformed_node_is_refused(obj: Any, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_node(obj)
    assert str(err.value) == message


def test_a_bad_allocatable_names_the_node_and_the_field() -> None:
    with pytest.raises(InvalidInput, match=r"^Node n1: allocatable\.memory: 'lots' is not a Kubernetes quantity"):
        parse_node(node(status={"allocatable": {"memory": "lots"}}), track_resources=True)
    parse_node(node(status={"allocatable": {"memory": "lots"}}))  # not read when not tracked


@pytest.mark.parametrize(("parts", "message"), [
    # a cluster file's quoted "false" was read as true: the node silently unschedulable
    ({"spec": {"unschedulable": "false"}}, "Node n1: spec.unschedulable must be true or false, got 'false'"),
    ({"spec": ["x"]}, "Node n1: spec must be a mapping"),
    ({"status": ["x"]}, "Node n1: status must be a mapping"),
    ({"status": {"allocatable": "8"}},
     "Node n1: status.allocatable must be a mapping such as {cpu: \"8\", memory: 16Gi}"),
])
def test_a_field_of_the_wrong_kind_is_refused_not_misread(parts: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        parse_node(node(**parts), track_resources=True)
    assert str(err.value) == message
    assert not parse_node(node(spec={"unschedulable": None})).unschedulable
