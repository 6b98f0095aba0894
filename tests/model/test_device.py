"""The Device resource: parse_device reads a node's devices, bandwidth matrix and kubelet checkpoint
(seeds 001 and 003), refusing a malformed one by the field that is wrong; device_object writes one
back, and what it writes parses to the same thing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.model import names
from devshare.model.device import DeviceInfo, NodeDevices, device_object, parse_device, parse_topology_matrix
from devshare.model.errors import InvalidDevice

GiB = 2**30


def device(**fields: object) -> dict[str, object]:
    d: dict[str, object] = {"type": "gpu", "minor": 0, "id": "GPU-0",
                            "resources": {"koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory": "16Gi"}}
    d.update(fields)
    return {"kind": "Device", "metadata": {"name": "n"}, "spec": {"devices": [{k: v for k, v in d.items()
                                                                              if v is not None}]}}


@pytest.mark.parametrize(("fields", "message"), [
    ({"minor": None}, "minor is missing"),
    ({"id": None}, "id is missing"),
    ({"id": ""}, "id is missing"),
    ({"resources": None}, "resources are missing"),
    ({"resources": {}}, "resources are missing"),
    ({"resources": {"koordinator.sh/gpu-core": "100"}}, "a gpu needs its memory"),
    ({"type": "rdma", "resources": None}, "koordinator.sh/rdma"),
])
def test_incomplete_devices_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidDevice, match=message):
        parse_device(device(**fields))
    assert parse_device(device()).devices[0].memory == 16 * 2**30


@pytest.mark.parametrize(("fields", "message"), [
    ({"type": None}, "Device n: spec.devices[0]: type is missing (gpu, rdma or fpga)"),
    ({"minor": -1}, "Device n: spec.devices[0]: minor must be an integer >= 0, got -1"),
    ({"minor": True}, "Device n: spec.devices[0]: minor must be an integer >= 0, got True"),
    ({"minor": "0"}, "Device n: spec.devices[0]: minor must be an integer >= 0, got '0'"),
    ({"health": "yes"}, "Device n: spec.devices[0]: health must be true or false, got 'yes'"),
    ({"resources": ["x"]}, "Device n: spec.devices[0]: resources must be a mapping"),
    ({"resources": {"koordinator.sh/gpu-core": "lots", "koordinator.sh/gpu-memory": "1Gi"}},
     "Device n: spec.devices[0].resources.gpu-core: 'lots' is not a Kubernetes quantity"),
    ({"resources": {"koordinator.sh/gpu-memory": "1.5"}},
     "Device n: spec.devices[0].resources.gpu-memory: '1.5' must be a whole number"),
])
def test_a_bad_field_is_refused_by_its_place(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidDevice) as err:
        parse_device(device(**fields))
    assert str(err.value).startswith(message)


@pytest.mark.parametrize(("obj", "message"), [
    ([], "a Device must be a mapping with metadata and spec"),
    ({"spec": {}}, "metadata.name: metadata.name (the node's name) is missing"),
    ({"metadata": {"name": "n"}, "spec": ["x"]}, "Device n: spec: spec must be a mapping"),
    ({"metadata": {"name": "n"}, "spec": {"devices": {"gpu": 1}}},
     "Device n: spec.devices: spec.devices must be a list"),
    ({"metadata": {"name": "n"}, "spec": {"devices": ["gpu"]}},
     "Device n: spec.devices[0]: each device must be a mapping"),
])
def test_a_malformed_object_is_refused(obj: Any, message: str) -> None:
    with pytest.raises(InvalidDevice) as err:
        parse_device(obj)
    assert str(err.value) == message


def test_a_device_listed_twice_is_refused() -> None:
    d = device()
    d["spec"]["devices"].append(dict(d["spec"]["devices"][0], id="GPU-1"))  # type: ignore[index]
    with pytest.raises(InvalidDevice, match=r"^Device n: spec.devices\[1\]: gpu minor 0 is listed twice$"):
        parse_device(d)


def test_devices_read_in_every_spelling_and_sorted() -> None:
    nd = parse_device({"metadata": {"name": "n", "labels": {names.NODE_GPU_MODEL: "A100"}}, "spec": {"devices": [
        {"deviceType": "rdma", "minor": 0, "uuid": "mlx5_0", "resource": {"kubernetes.io/rdma": "100"}},
        {"type": "gpu", "minor": 1, "id": "GPU-1", "health": False, "model": "A100",
         "resources": {"kubernetes.io/gpu-memory": "40Gi", "kubernetes.io/gpu-core": "50"}},
        {"type": "gpu", "minor": 0, "id": "GPU-0", "resources": {"koordinator.sh/gpu-memory": "40Gi"}},
        {"type": "fpga", "minor": 0, "id": "f0", "resources": {"koordinator.sh/fpga": "100"}},
    ]}})
    assert nd.devices == (
        DeviceInfo(type="fpga", minor=0, id="f0", memory=0),
        DeviceInfo(type="gpu", minor=0, id="GPU-0", memory=40 * GiB),  # no gpu-core: the whole card
        DeviceInfo(type="gpu", minor=1, id="GPU-1", health=False, core_milli=500, memory=40 * GiB, model="A100"),
        DeviceInfo(type="rdma", minor=0, id="mlx5_0"),
    )
    assert nd.gpu_model == "A100" and nd.gpu_bandwidth is None
    assert [d.minor for d in nd.of_type("gpu")] == [0, 1] and nd.of_type("npu") == ()


def test_kubelets_checkpoint_names_the_cards_held_outside() -> None:
    """Seed 001's devices-checkpoints and its example's gpu-checkpoints: both read, a time-sliced
    replica (GPU-x::3) holds its card, each card and pod named once."""
    entries = [{"podUID": "u1", "deviceIDs": ["GPU-a::3", "GPU-b"]}, {"podUID": "u2", "deviceIDs": ["GPU-a::1"]}]
    obj = device()
    obj["metadata"] = {"name": "n", "annotations": {names.DEVICE_CHECKPOINTS: json.dumps(entries),
                                                   names.GPU_CHECKPOINTS: json.dumps([{"deviceIDs": ["GPU-c"]}])}}
    nd = parse_device(obj)
    assert nd.held_outside == ("GPU-a", "GPU-b", "GPU-c")
    assert nd.held_pods == ("u1", "u2")


@pytest.mark.parametrize("raw", ['{"podUID": "u"}', "[1]", "not json"])
def test_a_malformed_checkpoint_is_refused(raw: str) -> None:
    obj = device()
    obj["metadata"] = {"name": "n", "annotations": {names.DEVICE_CHECKPOINTS: raw}}
    with pytest.raises(InvalidDevice) as err:
        parse_device(obj)
    assert str(err.value) == (f"Device n: annotation {names.DEVICE_CHECKPOINTS} must be a JSON list of "
                              "checkpoint entries")


def test_the_bandwidth_matrix_is_read_for_the_gpus() -> None:
    obj = device()
    obj["spec"]["topologies"] = {"gpu": [{"name": "other"}, {"name": "bandwidth", "topology": "[[600]]"}]}  # type: ignore[index]
    assert parse_device(obj).gpu_bandwidth == ((600.0,),)
    obj["spec"]["topologies"] = {"gpu": [{"name": "bandwidth", "topology": "[[600, 50], [50, 600]]"}]}  # type: ignore[index]
    with pytest.raises(InvalidDevice, match=r"^Device n: spec.topologies.gpu: bandwidth topology is 2x2 but the "
                                            r"node has 1 GPUs$"):
        parse_device(obj)


@pytest.mark.parametrize(("text", "message"), [
    ("[[1,2]", "bandwidth topology is not valid JSON (Expecting ',' delimiter at 6)"),
    ("{}", "bandwidth topology must be a list of rows, e.g. [[750,48],[48,750]]"),
    ([1, 2], "bandwidth topology must be a list of rows, e.g. [[750,48],[48,750]]"),
    ([[1, 2], [3]], "bandwidth topology must be square: row 1 has 1 of 2"),
    ([[1, -2], [3, 4]], "bandwidth [0][1] must be a number >= 0, got -2"),
    ([[1, True], [3, 4]], "bandwidth [0][1] must be a number >= 0, got True"),
    ([[1, 2], [float("inf"), 4]], "bandwidth [1][0] must be a number >= 0, got inf"),
    ([[1, 2], ["3", 4]], "bandwidth [1][0] must be a number >= 0, got '3'"),
])
def test_a_bad_bandwidth_matrix_says_what_is_wrong(text: Any, message: str) -> None:
    with pytest.raises(InvalidDevice) as err:
        parse_topology_matrix(text, field="f")
    assert str(err.value) == f"f: {message}"


def test_a_matrix_from_text_or_lists() -> None:
    assert parse_topology_matrix("[[750, 48], [48, 750]]", field="f") == ((750.0, 48.0), (48.0, 750.0))
    assert parse_topology_matrix([[0.5]], field="f", size=1) == ((0.5,),)
    assert parse_topology_matrix("[]", field="f") == ()


gpus = st.lists(st.builds(lambda core, mem, health, model: ("gpu", core, mem, health, model),
                          st.integers(1, 100).map(lambda p: p * 10), st.integers(1, 2**40), st.booleans(),
                          st.sampled_from(["", "NVIDIA A100-SXM4-80GB"])), max_size=4)
others = st.lists(st.builds(lambda t, core: (t, core, 0, True, ""), st.sampled_from(["rdma", "fpga"]),
                            st.integers(1, 100).map(lambda p: p * 10)), max_size=3)


@st.composite
def node_devices(draw: st.DrawFn) -> NodeDevices:
    devs: list[DeviceInfo] = []
    for kind in (draw(gpus), draw(others)):
        for t, core, mem, health, model in kind:
            minor = sum(1 for d in devs if d.type == t)
            devs.append(DeviceInfo(type=t, minor=minor, id=f"{t}-{minor}", health=health, core_milli=core, memory=mem,
                                   model=model))
    n = sum(1 for d in devs if d.type == "gpu")
    bw = draw(st.none() | st.lists(st.lists(st.integers(0, 900).map(float), min_size=n, max_size=n), min_size=n,
                                   max_size=n).map(lambda rows: tuple(tuple(r) for r in rows)))
    return NodeDevices(node="n1", devices=tuple(sorted(devs, key=lambda d: (d.type, d.minor))), gpu_bandwidth=bw)


@given(node_devices())
def test_what_device_object_writes_parses_back_the_same(nd: NodeDevices) -> None:
    obj = device_object(nd)
    assert (obj["apiVersion"], obj["kind"]) == (names.DEVICE_API_VERSION, names.DEVICE_KIND)
    assert parse_device(json.loads(json.dumps(obj))) == nd


def test_device_object_carries_labels_and_annotations() -> None:
    held = json.dumps([{"podUID": "u", "deviceIDs": ["GPU-x"]}])
    obj = device_object(NodeDevices(node="n"), labels={names.NODE_GPU_MODEL: "T4"},
                        annotations={names.DEVICE_CHECKPOINTS: held})
    assert obj["metadata"] == {"name": "n", "labels": {names.NODE_GPU_MODEL: "T4"},
                               "annotations": {names.DEVICE_CHECKPOINTS: held}}
    nd = parse_device(obj)
    assert (nd.gpu_model, nd.held_outside, nd.held_pods) == ("T4", ("GPU-x",), ("u",))


@pytest.mark.parametrize(("fields", "message"), [
    ({"resources": {"koordinator.sh/gpu-core": "0", "koordinator.sh/gpu-memory": "16Gi"}},
     "Device n: spec.devices[0]: gpu-core is 0: a device's capacity must be above 0 (100 = all of it)"),
    ({"resources": {"kubernetes.io/gpu-core": "-100", "koordinator.sh/gpu-memory": "16Gi"}},
     "Device n: spec.devices[0]: gpu-core is -100: a device's capacity must be above 0 (100 = all of it)"),
    ({"resources": {"koordinator.sh/gpu-memory": "-16Gi"}},
     "Device n: spec.devices[0]: gpu-memory is -16Gi: a GPU's memory must be 0 or more bytes, e.g. 16Gi"),
    ({"type": "rdma", "resources": {"koordinator.sh/rdma": "0"}},
     "Device n: spec.devices[0]: rdma is 0: a device's capacity must be above 0 (100 = all of it)"),
])
def test_a_capacity_out_of_range_is_named_with_its_value(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidDevice) as err:
        parse_device(device(**fields))
    assert str(err.value) == message


@pytest.mark.parametrize(("topologies", "message"), [
    # a list where the mapping by device type belongs: the bandwidth matrix was silently dropped
    ([{"name": "bandwidth", "topology": "[[600]]"}],
     "Device n: spec.topologies: must map each device type to its list of topologies, e.g. "
     "{gpu: [{name: bandwidth, topology: \"[[750,48],[48,750]]\"}]}"),
    ({"gpu": {"name": "bandwidth", "topology": "[[600]]"}},
     "Device n: spec.topologies.gpu: must be a list of topologies, e.g. "
     "[{name: bandwidth, topology: \"[[750,48],[48,750]]\"}]"),
    ({"gpu": ["bandwidth"]},
     "Device n: spec.topologies.gpu: must be a list of topologies, e.g. "
     "[{name: bandwidth, topology: \"[[750,48],[48,750]]\"}]"),
])
def test_a_misshapen_topology_is_refused_not_dropped(topologies: Any, message: str) -> None:
    obj = device()
    obj["spec"]["topologies"] = topologies  # type: ignore[index]
    with pytest.raises(InvalidDevice) as err:
        parse_device(obj)
    assert str(err.value) == message
