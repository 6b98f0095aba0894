"""The whole agent wired together (:mod:`devshare.agent.run`): which names it serves as device plugins,
which fall back to the node status, and what the usage monitor reports through it. Serving over gRPC is
``deviceplugin/test_server.py``'s; the agent is only built here, never started."""

from __future__ import annotations

from pathlib import Path

from devshare.agent.fake import FakeBackend
from devshare.agent.resources import resource_named
from devshare.agent.run import Agent
from devshare.agent.usage import OVER_SHARE_REASON, ContainerUsage
from devshare.model.dialects import aliyun, koordinator_names, nvidia
from support.agent import MemoryClient, write_fake


class Closing(FakeBackend):
    closed = False

    def close(self) -> None:
        self.closed = True
        super().close()


def test_too_many_ids_fall_back_to_node_status(tmp_path: Path) -> None:
    backend = FakeBackend(write_fake(tmp_path / "n.yaml", gpus=8, memory="80Gi"), node="n1")
    res = resource_named(aliyun.ALIYUN_GPU_MEM)
    assert res is not None
    client = MemoryClient()
    agent = Agent(backend, "n1", client, resources=[res], plugin_dir=tmp_path / "plugins")
    assert agent.served == []
    agent.reporter.sync()
    status = client.nodes["n1"]["status"]
    assert status["capacity"][aliyun.ALIYUN_GPU_MEM] == str(8 * 80 * 1024)
    small = Agent(FakeBackend(write_fake(tmp_path / "s.yaml", gpus=2, memory="16Gi"), node="n1"), "n1",
                  MemoryClient(), resources=[res], plugin_dir=tmp_path / "plugins")
    assert [r.name for r in small.served] == [aliyun.ALIYUN_GPU_MEM]


def test_names_without_a_device_here_are_neither_served_nor_advertised(tmp_path: Path) -> None:
    names = [nvidia.NVIDIA_GPU, koordinator_names.KOORD_RDMA, koordinator_names.KOORD_FPGA]
    resources = [r for r in map(resource_named, names) if r is not None]
    client = MemoryClient()
    agent = Agent(FakeBackend(write_fake(tmp_path / "n.yaml", gpus=2, rdma=[{"id": "mlx5_0"}]), node="n1"), "n1",
                  client, resources=resources, plugin_dir=tmp_path / "plugins", usage_interval=0)
    assert [r.name for r in agent.served] == [nvidia.NVIDIA_GPU, koordinator_names.KOORD_RDMA]
    assert agent.reporter.status_extra == ()  # no FPGA on the node: not a fallback either
    agent.reporter.sync()
    assert koordinator_names.KOORD_FPGA not in client.nodes["n1"]["status"]["capacity"]


def test_usage_is_monitored_only_when_asked_and_over_share_events_name_the_pod(tmp_path: Path) -> None:
    fake = write_fake(tmp_path / "n.yaml", gpus=1)
    assert Agent(FakeBackend(fake, node="n1"), "n1", MemoryClient(), plugin_dir=tmp_path / "p",
                 usage_interval=0).usage is None
    client = MemoryClient()
    agent = Agent(FakeBackend(fake, node="n1"), "n1", client, plugin_dir=tmp_path / "p", usage_interval=5)
    assert agent.usage is not None and agent.reporter.usage is not None
    row = ContainerUsage(namespace="team-a", pod="train", container="main", uuid="GPU-x", minor=0, pod_uid="u1")
    agent._over_share_event(row, "holds 9 GiB of its 6 GiB share")
    [event] = client.events
    assert event["metadata"]["namespace"] == "team-a"
    assert event["involvedObject"]["name"] == "train" and event["involvedObject"]["uid"] == "u1"
    assert (event["reason"], event["message"]) == (OVER_SHARE_REASON, "holds 9 GiB of its 6 GiB share")
    assert event["source"]["host"] == "n1"


def test_close_closes_the_discovery_backend(tmp_path: Path) -> None:
    backend = Closing(write_fake(tmp_path / "n.yaml", gpus=1), node="n1")
    agent = Agent(backend, "n1", MemoryClient(), plugin_dir=tmp_path / "p", usage_interval=0)
    agent.close()
    assert backend.closed
