"""Identical replicas on one node (issue 13): kubelet's Allocate does not say which pod it is for,
so the agent serves a call that matches several identical pods with a stand-in's devices and,
when kubelet's checkpoint shows the container was another pod's, trades the two pods'
allocations. Played by a client that acts as kubelet over the real device-plugin gRPC sockets,
admitting the replicas in random orders, with an agent restart anywhere: no refusal, no
container given another pod's cards, and every annotation ends up naming what its pod's
containers got."""

from __future__ import annotations

import json
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devshare.agent.fake import FakeBackend
from devshare.agent.matching import ASSIGNED
from devshare.agent.resources import resource_named
from devshare.agent.run import Agent
from devshare.model import names
from devshare.model.codecs import decode_allocation
from devshare.model.dialects.koordinator_names import KOORD_GPU_CORE, KOORD_GPU_MEMORY_RATIO
from support.agent import MemoryClient, gpu, pod, write_fake
from support.kubelet import CHECKPOINT, Kubelet

RESOURCES = [r for r in (resource_named(KOORD_GPU_CORE), resource_named(KOORD_GPU_MEMORY_RATIO)) if r]
SERVED = {r.name for r in RESOURCES}
GPUS = 8


@pytest.fixture
def sockdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="dsrep", dir="/tmp"))  # unix socket paths must stay short
    yield d
    shutil.rmtree(d, ignore_errors=True)


def replicas(n: int, containers: list[list[str]], uuids: list[str], bound: list[int]) -> list[dict[str, Any]]:
    """``n`` identical pods (the same containers asking 30% of a card); pod i's container j holds
    GPU (i * len(containers) + j) % GPUS, so each pod's cards tell it apart. ``bound[i]``: when pod i
    was bound (the stand-in is the first bound)."""
    out = []
    for i in range(n):
        spec = []
        for j, asks in enumerate(containers):
            minor = (i * len(containers) + j) % GPUS
            spec.append((f"c{j}", dict.fromkeys(asks, 30), [gpu(minor, uuids[minor], 300, 0, 300)]))
        p = pod(f"r{i}", "n1", spec, uid=f"uid-r{i}")
        t = f"2026-01-01T00:00:{bound[i]:02d}Z"
        p["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": t}]
        out.append(p)
    return out


class Node:
    """The agent on node n1 against the in-memory API, restartable."""

    def __init__(self, sockdir: Path, fake: Path, client: MemoryClient) -> None:
        self.sockdir, self.fake, self.client = sockdir, fake, client
        self.journal = sockdir / "agent-checkpoint.json"
        self.agent = self._start()

    def _start(self) -> Agent:
        agent = Agent(FakeBackend(self.fake, node="n1"), "n1", self.client, resources=RESOURCES,
                      plugin_dir=self.sockdir, checkpoint=self.sockdir / CHECKPOINT, journal=self.journal,
                      watch_interval=0.05, tick_interval=0.05)
        agent.start()
        return agent

    def restart(self) -> None:
        self.agent.close()
        self.agent = self._start()

    def settle(self) -> None:
        """What the agent does within a second of the last Allocate: resolve, trade, mark."""
        for _ in range(5):
            self.agent.allocator.tick()
            if not self.agent.allocator.journal.handouts and not self.agent.allocator.journal.writes:
                return
        raise AssertionError(f"still in flight: {self.agent.allocator.journal.state}")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(2, 4),
    containers=st.sampled_from([[[KOORD_GPU_CORE]], [[KOORD_GPU_CORE, KOORD_GPU_MEMORY_RATIO]],
                                [[KOORD_GPU_CORE], [KOORD_GPU_CORE, KOORD_GPU_MEMORY_RATIO]]]),
    seed=st.integers(0, 2**16),
    restart=st.integers(-1, 16),
)
def test_identical_replicas_all_start_with_their_own_devices(
    sockdir: Path, tmp_path: Path, n: int, containers: list[list[str]], seed: int, restart: int,
) -> None:
    for f in sockdir.iterdir():
        f.unlink()
    rng = random.Random(seed)
    fake = write_fake(tmp_path / "n.yaml", gpus=GPUS, memory="16Gi")
    uuids = [g.uuid for g in FakeBackend(fake, node="n1").discover().gpus]
    bound = list(range(n))
    rng.shuffle(bound)
    pods = replicas(n, containers, uuids, bound)
    before = sorted(p["metadata"]["annotations"][names.ALLOCATION] for p in pods)
    client = MemoryClient(pods)
    kubelet = Kubelet(sockdir, rng=rng)
    node = Node(sockdir, fake, client)
    try:
        kubelet.wait_registered(len(RESOURCES))
        order = list(range(n))
        rng.shuffle(order)  # kubelet admits in its own order, not the binding order

        def between() -> None:
            if kubelet.calls == restart:  # the agent restarts before this Allocate
                node.restart()
                kubelet.wait_registered(len(RESOURCES))

        for i in order:
            kubelet.admit(client.pods[("default", f"r{i}")], SERVED, between)  # Refused fails the test
        node.settle()
    finally:
        node.agent.close()
        kubelet.stop()

    after = {p["metadata"]["uid"]: p["metadata"]["annotations"] for p in client.pods.values()}
    # a permutation of the allocations the scheduler made: nobody's cards invented or lost
    assert sorted(a[names.ALLOCATION] for a in after.values()) == before
    for uid, ann in after.items():
        alloc = decode_allocation(ann)
        assert alloc is not None
        assert ann[ASSIGNED] == "true"
        for c in alloc.containers:
            envs = kubelet.got[(uid, c.name)]
            # the container got exactly the cards its pod's annotation records
            assert envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(uuids[g.minor] for g in c.devices), (uid, c.name)
            assert envs["DEVSHARE_GPU_CORE_LIMIT"] == "30"
            # and kubelet recorded ids of those cards (GetPreferredAllocation): its checkpoint and its
            # pod-resources API name the cards the container has, trades included
            for resource in SERVED & set(next(a for a in pods[0]["spec"]["containers"]
                                              if a["name"] == c.name)["resources"]["limits"]):
                cards = {int(i.split("-")[0]) for i in kubelet.picked[(uid, c.name, resource)]}
                assert cards == {g.minor for g in c.devices}, (uid, c.name, resource)
        if ann[names.ALLOCATION] != pods[int(uid[-1])]["metadata"]["annotations"][names.ALLOCATION]:
            assert ann[names.TRADE] in after  # traded, tagged with its partner


def test_trade_is_two_tagged_writes_and_the_journal_survives_a_restart(sockdir: Path, tmp_path: Path) -> None:
    """Three identical pods, kubelet admits the last bound first: the first bound stood in, so the
    two trade; the agent restarts between the Allocate and the trade and still makes it."""
    fake = write_fake(tmp_path / "n.yaml", gpus=GPUS, memory="16Gi")
    uuids = [g.uuid for g in FakeBackend(fake, node="n1").discover().gpus]
    pods = replicas(3, [[KOORD_GPU_CORE]], uuids, [0, 1, 2])
    client = MemoryClient(pods)
    kubelet = Kubelet(sockdir)
    node = Node(sockdir, fake, client)
    try:
        kubelet.wait_registered(len(RESOURCES))
        node.agent.close()  # no background resolution: this test looks between the steps
        node.agent = Agent(FakeBackend(fake, node="n1"), "n1", client, resources=RESOURCES, plugin_dir=sockdir,
                           checkpoint=sockdir / CHECKPOINT, journal=node.journal, watch_interval=0.05,
                           tick_interval=3600)
        node.agent.start()
        kubelet.wait_registered(len(RESOURCES))
        kubelet.admit(client.pods[("default", "r2")], SERVED)
        # r0 (first bound) stood in: r2's container has r0's card, the handout is on disk
        assert kubelet.got[("uid-r2", "c0")]["NVIDIA_VISIBLE_DEVICES"] == uuids[0]
        journal = json.loads(node.journal.read_text())
        assert [(h["standin"], h["container"]) for h in journal["handouts"]] == [("uid-r0", "c0")]
        node.agent.close()
        node.agent = Agent(FakeBackend(fake, node="n1"), "n1", client, resources=RESOURCES, plugin_dir=sockdir,
                           checkpoint=sockdir / CHECKPOINT, journal=node.journal, watch_interval=0.05,
                           tick_interval=3600)
        node.agent.start()
        node.agent.allocator.tick()  # kubelet's checkpoint says r2: r2 and r0 trade
        ann = {p["metadata"]["name"]: p["metadata"]["annotations"] for p in client.pods.values()}
        assert ann["r2"][names.TRADE] == "uid-r0" and ann["r0"][names.TRADE] == "uid-r2"
        assert decode_allocation(ann["r2"]).containers[0].devices[0].minor == 0  # type: ignore[union-attr]
        assert decode_allocation(ann["r0"]).containers[0].devices[0].minor == 2  # type: ignore[union-attr]
        assert ann["r2"][ASSIGNED] == "true" and ASSIGNED not in ann["r0"]
        writes = [c for c in client.calls if c.startswith("patch_pod_annotations")]
        assert writes == ["patch_pod_annotations default/r2", "patch_pod_annotations default/r0",
                          "patch_pod_annotations default/r2"]  # the two legs, then r2's mark
        assert node.agent.allocator.trades == 1
        # the others start with what their annotations now say
        kubelet.admit(client.pods[("default", "r0")], SERVED)
        kubelet.admit(client.pods[("default", "r1")], SERVED)
        node.agent.allocator.tick()
        assert kubelet.got[("uid-r0", "c0")]["NVIDIA_VISIBLE_DEVICES"] == uuids[2]
        assert kubelet.got[("uid-r1", "c0")]["NVIDIA_VISIBLE_DEVICES"] == uuids[1]
        assert json.loads(node.journal.read_text())["handouts"] == []
        assert not node.agent.allocator.journal.writes
    finally:
        node.agent.close()
        kubelet.stop()


def test_differing_pods_are_still_refused(sockdir: Path, tmp_path: Path) -> None:
    """Pods that ask the same amount but are not identical (another namespace, other containers)
    cannot stand in for each other: the call is refused as before."""
    fake = write_fake(tmp_path / "n.yaml", gpus=GPUS, memory="16Gi")
    uuids = [g.uuid for g in FakeBackend(fake, node="n1").discover().gpus]
    a = pod("a", "n1", [("c0", {KOORD_GPU_CORE: 30}, [gpu(0, uuids[0], 300, 0, 300)])])
    b = pod("b", "n1", [("c0", {KOORD_GPU_CORE: 30}, [gpu(1, uuids[1], 300, 0, 300)])], namespace="other")
    client = MemoryClient([a, b])
    kubelet = Kubelet(sockdir)
    node = Node(sockdir, fake, client)
    try:
        kubelet.wait_registered(len(RESOURCES))
        with pytest.raises(Exception, match="ambiguous Allocate"):
            kubelet.admit(client.pods[("default", "a")], SERVED)
    finally:
        node.agent.close()
        kubelet.stop()
