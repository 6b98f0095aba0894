"""Makes kubelet checkpoint fixtures with kubelet's own code (the kubelet-harness binary): devshare's
device plugins and a stand-in for another vendor's plugin (NVIDIA's: ``nvidia.com/gpu``, one id per
card UUID) registered with kubelet's device manager, a few pods admitted, and the checkpoint kubelet
wrote copied out beside what the device manager itself says each container holds::

    PYTHONPATH=src:tests .venv/bin/python tests/e2e/kubelet_fixtures.py tests/agent/fixtures/kubelet-v1.37.2

No API server: the agent reads its pods from memory. ``tests/agent/test_checkpoint.py`` reads the
committed output; ``tests/e2e/test_kubelet_checkpoint.py`` makes it again and checks the committed one
still has the shape kubelet writes.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import yaml

from devshare.agent.deviceplugin import deviceplugin_v1beta1_pb2 as pb
from devshare.agent.deviceplugin import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from devshare.agent.fake import FakeBackend
from devshare.agent.resources import resource_named
from devshare.agent.run import Agent
from devshare.model import names
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.codecs import encode_allocation
from e2e.kubelet import CHECKPOINT, HARNESS, Kubelet
from support.agent import MemoryClient

NODE = "fixture-node"
UUIDS = [f"GPU-{NODE}-{i}" for i in range(2)]
DEVSHARE = ["koordinator.sh/gpu-core", "koordinator.sh/gpu-memory-ratio"]
OTHER = "nvidia.com/gpu"  # served by the other vendor's plugin here
OTHER_SOCKET = "nvidia-gpu.sock"


class OtherVendorPlugin(pb_grpc.DevicePluginServicer):
    """A device plugin of another vendor: every card's UUID, one id each (as NVIDIA's lists them)."""

    def __init__(self) -> None:
        self.stop = threading.Event()

    def GetDevicePluginOptions(self, request: pb.Empty, context: Any) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions()

    def ListAndWatch(self, request: pb.Empty, context: Any) -> Iterator[pb.ListAndWatchResponse]:
        yield pb.ListAndWatchResponse(devices=[pb.Device(ID=u, health="Healthy") for u in UUIDS])
        while context.is_active() and not self.stop.wait(0.2):
            pass

    def Allocate(self, request: pb.AllocateRequest, context: Any) -> pb.AllocateResponse:
        return pb.AllocateResponse(container_responses=[
            pb.ContainerAllocateResponse(envs={"NVIDIA_VISIBLE_DEVICES": ",".join(c.devices_ids)})
            for c in request.container_requests])

    def PreStartContainer(self, request: pb.PreStartContainerRequest, context: Any) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


def _pod(name: str, uid: str, containers: list[tuple[str, dict[str, str], list[DeviceGrant]]],
         init: list[tuple[str, dict[str, str], list[DeviceGrant]]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    alloc = PodAllocation(node=NODE, containers=tuple(ContainerAllocation(name=c, devices=tuple(g))
                                                      for c, _, g in [*init, *containers]))
    ann = {names.ALLOCATION: encode_allocation(alloc)} if any(g for _, _, g in [*init, *containers]) else {}

    def spec(items: Any) -> list[dict[str, Any]]:
        return [{"name": c, "image": "cuda", "resources": {"limits": limits}} for c, limits, _ in items]

    body: dict[str, Any] = {"nodeName": NODE, "containers": spec(containers)}
    if init:
        body["initContainers"] = spec(init)
    return {"apiVersion": "v1", "kind": "Pod", "status": {"phase": "Pending"}, "spec": body,
            "metadata": {"name": name, "namespace": "default", "uid": uid, "annotations": ann}}


def pods() -> list[dict[str, Any]]:
    def g(minor: int, core: int, ratio: int) -> DeviceGrant:
        return DeviceGrant(type=names.GPU, minor=minor, id=UUIDS[minor], core_milli=core * 10,
                           memory_ratio_milli=ratio * 10)

    share = {"koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory-ratio": "25"}
    return [
        _pod("shared", "11111111-1111-4111-8111-111111111111",
             [("main", share, [g(0, 30, 25)]), ("side", {"koordinator.sh/gpu-core": "20"}, [g(1, 20, 20)])],
             init=[("setup", {"koordinator.sh/gpu-core": "10"}, [g(1, 10, 10)])]),
        _pod("other-vendor", "22222222-2222-4222-8222-222222222222", [("cuda", {OTHER: "1"}, [])]),
    ]


def generate(binary: Path, out: Path) -> dict[str, Any]:
    """Run it all in a temporary directory; write ``kubelet_internal_checkpoint`` and
    ``harness-view.json`` (per pod and container, the ids the device manager says it holds) to
    ``out``; return the view."""
    with tempfile.TemporaryDirectory(prefix="dsfix", dir="/tmp") as d:  # unix socket paths must stay short
        root = Path(d)
        kubelet = Kubelet(binary, root)
        fake = root / "node.yaml"
        fake.write_text(yaml.safe_dump({"gpus": [{"minor": i, "uuid": u} for i, u in enumerate(UUIDS)],
                                        "memory": "1Gi"}))
        client = MemoryClient(pods())
        resources = [r for r in (resource_named(n) for n in DEVSHARE) if r is not None]
        agent = Agent(FakeBackend(fake, node=NODE), NODE, client, resources=resources, plugin_dir=kubelet.plugin_dir,
                      journal=root / "agent.json", checkpoint=kubelet.plugin_dir / CHECKPOINT, watch_interval=0.1,
                      usage_interval=0)
        other = OtherVendorPlugin()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_DevicePluginServicer_to_server(other, server)
        try:
            kubelet.start()
            agent.start()
            kubelet.wait_allocatable({n: 200 for n in DEVSHARE})
            server.add_insecure_port(f"unix://{kubelet.plugin_dir / OTHER_SOCKET}")
            server.start()
            with grpc.insecure_channel(f"unix://{kubelet.plugin_dir / 'kubelet.sock'}") as channel:
                pb_grpc.RegistrationStub(channel).Register(pb.RegisterRequest(
                    version="v1beta1", endpoint=OTHER_SOCKET, resource_name=OTHER), timeout=10)
            kubelet.wait_allocatable({OTHER: len(UUIDS)})
            for p in client.list_node_pods(NODE):
                result = kubelet.admit(p)
                if not result["admitted"]:
                    raise RuntimeError(f"{p['metadata']['name']} was not admitted: {result['message']}")
            view = {"pods": [{"uid": p["uid"], "name": p["name"],
                              "containers": [{"name": c["name"], "devices": c["devices"]} for c in p["containers"]]}
                             for p in kubelet.pods()]}
            out.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(kubelet.checkpoint, out / CHECKPOINT)
            (out / "harness-view.json").write_text(json.dumps(view, indent=1, sort_keys=True) + "\n")
            return view
        finally:
            other.stop.set()
            server.stop(0)
            agent.close()
            kubelet.stop()


if __name__ == "__main__":
    from e2e.cluster import binaries

    if len(sys.argv) != 2:
        sys.exit("usage: kubelet_fixtures.py OUT_DIR")
    generate(binaries() / HARNESS, Path(sys.argv[1]))
    print(f"wrote {sys.argv[1]}/{CHECKPOINT} and harness-view.json")
