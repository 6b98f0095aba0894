"""A device type with Device objects but no dialect (issue 13: a pod asking ``koordinator.sh/npu: 50``
was placed with ``devices: []``, reserving nothing): configured in the file, its pods are filtered,
bound and reserved like rdma/fpga shares; not configured, they are refused with the type and the fix."""

from __future__ import annotations

import json
from typing import Any

from devshare.config import API_VERSION, KIND, parse_config
from devshare.kube.memory import MemoryBackend
from devshare.model.device import DeviceInfo, NodeDevices, device_object
from devshare.server.extender.serve import ExtenderOptions
from support.extender import bind, names_body, node, post, running, settle

NPU = "koordinator.sh/npu"


def npu_cluster(*pods: dict[str, Any]) -> MemoryBackend:
    objs: list[dict[str, Any]] = []
    for i in range(2):
        objs += [node(f"n{i}"), device_object(NodeDevices(node=f"n{i}", devices=(
            DeviceInfo(type="gpu", minor=0, id=f"GPU-n{i}", memory=2**34),
            DeviceInfo(type="npu", minor=0, id=f"NPU-n{i}-0"), DeviceInfo(type="npu", minor=1, id=f"NPU-n{i}-1"))))]
    return MemoryBackend.from_objects([*objs, *pods])


def npu_pod(name: str, share: str) -> dict[str, Any]:
    meta = {"name": name, "namespace": "default", "uid": f"uid-default-{name}"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "main", "image": "x", "resources": {"limits": {NPU: share}}}]}}


CONFIG = parse_config({"apiVersion": API_VERSION, "kind": KIND, "deviceTypes": {"npu": {"resources": [NPU]}},
                       "scheduling": {"nodePolicy": "binpack"}})


async def test_a_configured_type_is_placed_and_reserved() -> None:
    backend = npu_cluster(npu_pod("a", "60"), npu_pod("b", "60"), npu_pod("c", "200"))
    async with running(backend, ExtenderOptions(config=CONFIG)) as (client, runtime):
        out = await post(client, "/filter", names_body(npu_pod("a", "60"), ["n0", "n1"]))
        assert out["NodeNames"] == ["n0", "n1"] and not out["FailedNodes"]
        assert await bind(client, "a", "n0") == ""
        assert await bind(client, "b", "n0") == ""  # 60% + 60% do not share an npu: b takes the other one
        ann = (await backend.get_pod("default", "b"))["metadata"]["annotations"]  # type: ignore[index]
        devices = json.loads(ann["devshare.io/allocation"])["containers"][0]["devices"]
        assert [(d["type"], d["minor"], d["share"]) for d in devices] == [("npu", 1, 60)]
        assert json.loads(ann["scheduling.koordinator.sh/device-allocated"]) == {
            "npu": [{"minor": 1, "id": "NPU-n0-1", "resources": {NPU: "60"}}]}
        await settle(runtime, backend)
        used = {(n["name"], d["minor"]): d["used"]["core"] for n in runtime.state.inspect()["nodes"]
                for d in n["devices"] if d["type"] == "npu"}
        assert used == {("n0", 0): 60, ("n0", 1): 60, ("n1", 0): 0, ("n1", 1): 0}
        # two whole npus: only n1 has them free, and n0's reason says why
        out = await post(client, "/filter", names_body(npu_pod("c", "200"), ["n0", "n1"]))
        assert out["NodeNames"] == ["n1"]
        assert out["FailedNodes"]["n0"].startswith("needs 2 whole npu")


async def test_an_unconfigured_type_is_refused_with_the_fix() -> None:
    backend = npu_cluster(npu_pod("a", "50"))
    async with running(backend) as (client, _):
        out = await post(client, "/filter", names_body(npu_pod("a", "50"), ["n0", "n1"]))
        assert out["NodeNames"] == []
        reason = out["FailedAndUnresolvableNodes"]["n0"]
        assert f"asks for {NPU}, which no dialect of devshare reads: nodes list npu devices" in reason
        assert f"deviceTypes: {{npu: {{resources: [{NPU}]}}}}" in reason
        refused = await bind(client, "a", "n0")  # nor binds it, for the same reason
        assert refused.startswith("invalid request") and "which no dialect of devshare reads" in refused
