"""The device plugin over real gRPC unix sockets, with a fake kubelet: registration, ListAndWatch,
Allocate for multi-container pods, and re-registration after a kubelet restart."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from devshare.agent.deviceplugin import deviceplugin_v1beta1_pb2 as pb
from devshare.agent.deviceplugin import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from devshare.agent.fake import FakeBackend
from devshare.agent.matching import ASSIGNED
from devshare.agent.resources import resource_named
from devshare.agent.run import Agent
from devshare.model.dialects import koordinator_names, nvidia
from support.agent import GIB, MemoryClient, gpu, pod, write_fake
from support.kubelet import Kubelet
from support.waiting import eventually_in_thread


@pytest.fixture
def sockdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="dsdp", dir="/tmp"))  # unix socket paths must stay short
    yield d
    shutil.rmtree(d, ignore_errors=True)


def allocate(directory: Path, resource: str, *containers: int) -> pb.AllocateResponse:
    res = resource_named(resource)
    assert res is not None
    with grpc.insecure_channel(f"unix://{directory / res.socket_name()}") as channel:
        stub = pb_grpc.DevicePluginStub(channel)
        request = pb.AllocateRequest(container_requests=[
            pb.ContainerAllocateRequest(devices_ids=[f"id-{k}" for k in range(n)]) for n in containers])
        return stub.Allocate(request, timeout=10)


def test_register_list_allocate_and_kubelet_restart(sockdir: Path, tmp_path: Path) -> None:
    desc = write_fake(tmp_path / "n.yaml", gpus=2, memory="16Gi")
    backend = FakeBackend(desc, node="n1")
    u = [g.uuid for g in backend.discover().gpus]
    client = MemoryClient([pod("p", "n1", [
        ("a", {koordinator_names.KOORD_GPU_CORE: 50}, [gpu(0, u[0], 500, 8 * GIB, 500)]),
        ("b", {koordinator_names.KOORD_GPU_CORE: 50}, [gpu(1, u[1], 500, 8 * GIB, 500)]),
    ])])
    kubelet = Kubelet(sockdir)
    served = [r for r in (resource_named(koordinator_names.KOORD_GPU_CORE), resource_named(nvidia.NVIDIA_GPU),
                          resource_named(koordinator_names.KOORD_RDMA)) if r is not None]
    agent = Agent(backend, "n1", client, resources=served, plugin_dir=sockdir, watch_interval=0.1)
    try:
        agent.start()
        # no RDMA device on this node: only the two GPU resources are served
        assert [r.name for r in agent.served] == [koordinator_names.KOORD_GPU_CORE, nvidia.NVIDIA_GPU]
        assert kubelet.wait_registered(2) == {koordinator_names.KOORD_GPU_CORE, nvidia.NVIDIA_GPU}
        core = kubelet.lists[koordinator_names.KOORD_GPU_CORE].get(timeout=10)
        assert len(core) == 200 and all(h == "Healthy" for _, h in core)
        assert kubelet.lists[nvidia.NVIDIA_GPU].get(timeout=10) == [(u[0], "Healthy"), (u[1], "Healthy")]

        # the node status and the Device object were published too
        assert client.nodes["n1"]["status"]["capacity"][koordinator_names.KOORD_GPU_MEMORY] == str(32 * GIB)
        assert "n1" in client.devices

        # health change: the stream sends the new list
        write_fake(desc, gpus=2, memory="16Gi", unhealthy=[1])
        agent.reporter.sync()
        agent.plugins.notify()
        assert kubelet.lists[nvidia.NVIDIA_GPU].get(timeout=10) == [(u[0], "Healthy"), (u[1], "Unhealthy")]
        write_fake(desc, gpus=2, memory="16Gi")
        agent.reporter.sync()
        agent.plugins.notify()
        kubelet.lists[nvidia.NVIDIA_GPU].get(timeout=10)

        # Allocate: two containers asking the same amount, one call each, in container order
        first = allocate(sockdir, koordinator_names.KOORD_GPU_CORE, 50)
        assert first.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[0]
        second = allocate(sockdir, koordinator_names.KOORD_GPU_CORE, 50)
        assert second.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[1]
        assert client.pods[("default", "p")]["metadata"]["annotations"][ASSIGNED] == "true"
        # nothing left: refused with a message kubelet shows in the pod's events
        with pytest.raises(grpc.RpcError) as e:
            allocate(sockdir, koordinator_names.KOORD_GPU_CORE, 50)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "no pod on this node waits for 50 koordinator.sh/gpu-core" in (e.value.details() or "")

        # kubelet restarts: it wipes the directory and recreates its socket; the agent registers again
        kubelet.stop()
        # gRPC's stop already removed kubelet's socket; the plugins' sockets are wiped as kubelet does
        for f in list(sockdir.iterdir()):
            f.unlink()
        kubelet = Kubelet(sockdir)
        assert kubelet.wait_registered(2) == {koordinator_names.KOORD_GPU_CORE, nvidia.NVIDIA_GPU}
        assert len(kubelet.lists[koordinator_names.KOORD_GPU_CORE].get(timeout=30)) == 200
        client.add(pod("q", "n1", [("main", {nvidia.NVIDIA_GPU: 2}, [gpu(0, u[0]), gpu(1, u[1])])]))
        got = allocate(sockdir, nvidia.NVIDIA_GPU, 2)
        assert got.container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"] == f"{u[0]},{u[1]}"
        # the agent counts a registration round once its last Register call has returned, which can
        # be just after kubelet saw the request: wait for it rather than race it
        eventually_in_thread(lambda: agent.plugins.registrations >= 2, what="the second registration counted")
        assert agent.plugins.registrations == 2
    finally:
        agent.close()
        kubelet.stop()
    eventually_in_thread(lambda: not any(sockdir.glob("devshare-*.sock")), what="the plugin sockets removed")


def test_a_registration_whose_answer_was_lost_is_not_made_again(sockdir: Path, tmp_path: Path) -> None:
    """kubelet took the first resource's registration but its answer was lost (a timeout on a loaded
    node): kubelet refuses a second registration of an endpoint it follows ("device plugin already
    connected"), so the agent registers the resources it lacks only, and takes that refusal as held.
    Before, it registered every resource again on each retry and never got past the first (e2e:
    test_kubelet_restarts under load)."""
    desc = write_fake(tmp_path / "n.yaml", gpus=2, memory="16Gi")
    backend = FakeBackend(desc, node="n1")
    kubelet = Kubelet(sockdir)
    kubelet.lose_answer.add(koordinator_names.KOORD_GPU_CORE)
    served = [r for r in (resource_named(koordinator_names.KOORD_GPU_CORE), resource_named(nvidia.NVIDIA_GPU))
              if r is not None]
    agent = Agent(backend, "n1", MemoryClient([]), resources=served, plugin_dir=sockdir, watch_interval=0.1)
    try:
        agent.start()
        assert kubelet.wait_registered(2) == {koordinator_names.KOORD_GPU_CORE, nvidia.NVIDIA_GPU}
        eventually_in_thread(lambda: agent.plugins.registrations >= 1, what="the registration round counted")
        assert agent.plugins.registrations == 1  # the round ended: both held
        assert len(kubelet.lists[koordinator_names.KOORD_GPU_CORE].get(timeout=30)) == 200
    finally:
        agent.close()
        kubelet.stop()


def test_multi_container_request_in_one_call(sockdir: Path, tmp_path: Path) -> None:
    backend = FakeBackend(write_fake(tmp_path / "n.yaml", gpus=4), node="n1")
    u = [g.uuid for g in backend.discover().gpus]
    client = MemoryClient([pod("p", "n1", [
        ("a", {nvidia.NVIDIA_GPU: 1}, [gpu(2, u[2])]),
        ("b", {nvidia.NVIDIA_GPU: 1}, [gpu(3, u[3])]),
    ])])
    kubelet = Kubelet(sockdir)
    res = resource_named(nvidia.NVIDIA_GPU)
    assert res is not None
    agent = Agent(backend, "n1", client, resources=[res], plugin_dir=sockdir, watch_interval=0.1)
    try:
        agent.start()
        kubelet.wait_registered(1)
        got = allocate(sockdir, nvidia.NVIDIA_GPU, 1, 1)
        assert [c.envs["NVIDIA_VISIBLE_DEVICES"] for c in got.container_responses] == [u[2], u[3]]
    finally:
        agent.close()
        kubelet.stop()

