"""The lightkube AgentClient against the fake API server (tests/fakeapi), called from a thread
(the client is synchronous; the fake server runs on the test's event loop)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig

from devshare.agent.kubeclient import LightkubeClient
from devshare.model import names
from devshare.model.dialects import koordinator, nvidia
from fakeapi.plugin import fake_api, fake_kubeconfig  # noqa: F401
from fakeapi.server import FakeApiServer
from support.agent import gpu, pod


async def test_lightkube_client_round_trip(fake_api: FakeApiServer, fake_kubeconfig: Path) -> None:  # noqa: F811
    fake_api.put({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "status": {}})
    fake_api.put(pod("p", "n1", [("c", {nvidia.NVIDIA_GPU: 1}, [gpu(0, "GPU-a")])]))
    fake_api.put(pod("other", "n2", [("c", {nvidia.NVIDIA_GPU: 1}, [gpu(0, "GPU-b")])]))
    client = LightkubeClient(Client(KubeConfig.from_file(fake_kubeconfig), field_manager="devshare-agent"))
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
        client.patch_pod_annotations("default", "p", {"devshare.io/assigned": "true"})
        client.patch_node_status("n1", {koordinator.KOORD_GPU_MEMORY: "1"}, {koordinator.KOORD_GPU_MEMORY: "1"})

    await asyncio.to_thread(work)
    assert fake_api.get("pods", "default/p")["metadata"]["annotations"]["devshare.io/assigned"] == "true"
    node = fake_api.get("nodes", "n1")
    assert node is not None and node["status"]["capacity"][koordinator.KOORD_GPU_MEMORY] == "1"
