"""The agent's client (the one API client, driven from the agent's threads) against the fake API server
(tests/fakeapi): its calls are synchronous; the fake server runs on the test's event loop."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from devshare.agent.client import WriteRefused
from devshare.agent.kubeclient import FIELD_MANAGER, KubeAgentClient
from devshare.kube.errors import BackendError
from devshare.kube.rest import KubeClient
from devshare.model import names
from devshare.model.dialects import koordinator_names, nvidia
from fakeapi.plugin import fake_api, fake_kubeconfig  # noqa: F401
from fakeapi.server import FakeApiServer
from support.agent import gpu, pod


async def test_the_agents_requests_round_trip(fake_api: FakeApiServer, fake_kubeconfig: Path) -> None:  # noqa: F811
    fake_api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {}})
    created = fake_api.put(pod("p", "n1", [("c", {nvidia.NVIDIA_GPU: 1}, [gpu(0, "GPU-a")])]))
    fake_api.put(pod("other", "n2", [("c", {nvidia.NVIDIA_GPU: 1}, [gpu(0, "GPU-b")])]))
    client = KubeAgentClient(KubeClient.connect(fake_kubeconfig, field_manager=FIELD_MANAGER))
    obj = {"apiVersion": names.DEVICE_API_VERSION, "kind": "Device", "metadata": {"name": "n1"},
           "spec": {"devices": [{"type": "gpu", "minor": 0, "id": "GPU-a", "health": True}]}}

    def work() -> None:
        assert client.get_device("n1") is None
        client.put_device(obj)
        obj["spec"]["devices"][0]["health"] = False
        client.put_device(obj)  # replace
        got = client.get_device("n1")
        assert got is not None and got["spec"]["devices"][0]["health"] is False
        pods = client.list_node_pods("n1")
        assert [p["metadata"]["name"] for p in pods] == ["p"]
        client.patch_pod_annotations("default", "p", {"devshare.io/assigned": "true"},
                                     uid=created["metadata"]["uid"])
        with pytest.raises(LookupError):  # another pod under the name: not written
            client.patch_pod_annotations("default", "p", {"devshare.io/assigned": "x"}, uid="an-older-pod")
        with pytest.raises(LookupError):
            client.patch_pod_annotations("default", "gone", {"devshare.io/assigned": "x"})
        memory = koordinator_names.KOORD_GPU_MEMORY
        client.patch_node_status("n1", {memory: "1"}, {memory: "1"})
        client.patch_node_labels("n1", {names.NODE_GPU_MODEL: "A100"})
        client.close()

    await asyncio.to_thread(work)
    assert fake_api.get("pods", "default/p")["metadata"]["annotations"]["devshare.io/assigned"] == "true"
    node = fake_api.get("nodes", "n1")
    assert node is not None and node["status"]["capacity"][koordinator_names.KOORD_GPU_MEMORY] == "1"
    assert node["metadata"]["labels"][names.NODE_GPU_MODEL] == "A100"
    assert {q.get("fieldManager") for m, _, q in fake_api.requests if m != "GET"} == {FIELD_MANAGER}


async def test_a_refused_write_is_write_refused(fake_api: FakeApiServer, fake_kubeconfig: Path) -> None:  # noqa: F811
    fake_api.put(pod("p", "n1", [("c", {nvidia.NVIDIA_GPU: 1}, [gpu(0, "GPU-a")])]))
    fake_api.fail_next("patch", "pods", code=403)
    client = KubeAgentClient(KubeClient.connect(fake_kubeconfig))

    def work() -> None:
        try:
            with pytest.raises(WriteRefused, match="injected failure"):
                client.patch_pod_annotations("default", "p", {"devshare.io/assigned": "true"})
        finally:
            client.close()

    await asyncio.to_thread(work)


async def test_the_nodes_resource_slice_through_the_one_client(fake_api: FakeApiServer,  # noqa: F811
                                                               fake_kubeconfig: Path) -> None:  # noqa: F811
    """DRA on the node (agent/dra/node.py) reads claims and writes the node's ResourceSlice through the
    agent's client: no second client of the API server."""
    from devshare.agent.dra.node import publish_slice
    from devshare.agent.inventory import Inventory
    from devshare.model import dra
    from devshare.model.device import DeviceInfo, NodeDevices

    fake_api.put({"apiVersion": dra.API_VERSION, "kind": "ResourceClaim",
                  "metadata": {"name": "c", "namespace": "team"}, "spec": {"devices": {}}})
    client = KubeAgentClient(KubeClient.connect(fake_kubeconfig, field_manager=FIELD_MANAGER))
    nd = NodeDevices(node="n1", devices=(DeviceInfo(type="gpu", minor=0, id="GPU-a", memory=16 * 2**30),))

    def work() -> None:
        claim = client.get_claim("team", "c")
        assert claim is not None and claim["metadata"]["name"] == "c"
        assert client.get_claim("team", "none") is None
        assert publish_slice(client, nd, Inventory()) is not None  # created
        assert publish_slice(client, nd, Inventory()) is None  # unchanged: nothing written
        wider = NodeDevices(node="n1", devices=(*nd.devices, DeviceInfo(type="gpu", minor=1, id="GPU-b",
                                                                        memory=16 * 2**30)))
        assert publish_slice(client, wider, Inventory()) is not None  # replaced
        with pytest.raises(BackendError):
            client.get_claim("team", "Not A Name")  # refused before any request
        client.close()

    await asyncio.to_thread(work)
    slices = fake_api.store.list("resourceslices")[0]
    assert len(slices) == 1 and len(slices[0]["spec"]["devices"]) == 2
