"""Allocate matching: which container a call is for, what it gets, and when the pod is assigned."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devshare.agent.deviceplugin.allocator import Allocator
from devshare.agent.fake import FakeBackend
from devshare.agent.matching import ASSIGNED, AllocateError
from devshare.agent.resources import PluginResource, resource_named
from devshare.model import names
from devshare.model.codecs import encode_topology
from devshare.model.dialects import aliyun, nvidia
from devshare.model.dialects.koordinator_names import KOORD_GPU_CORE, KOORD_GPU_MEMORY_RATIO, KOORD_RDMA
from support.agent import GIB, MemoryClient, gpu, pod, write_fake

CORE = resource_named(KOORD_GPU_CORE)
RATIO = resource_named(KOORD_GPU_MEMORY_RATIO)
NVIDIA = resource_named(nvidia.NVIDIA_GPU)
ALIYUN = resource_named(aliyun.ALIYUN_GPU_MEM)
assert CORE and RATIO and NVIDIA and ALIYUN
SERVED = [KOORD_GPU_CORE, KOORD_GPU_MEMORY_RATIO, nvidia.NVIDIA_GPU, aliyun.ALIYUN_GPU_MEM,
          KOORD_RDMA]


@pytest.fixture
def backend(tmp_path: Path) -> FakeBackend:
    return FakeBackend(write_fake(tmp_path / "n.yaml", gpus=8, memory="16Gi",
                                  rdma=[{"id": "mlx5_0", "paths": ["/dev/infiniband/uverbs0"]}]), node="n1")


def allocator(client: MemoryClient, backend: FakeBackend, checkpoint: Path | None = None) -> Allocator:
    inv = backend.discover()
    return Allocator("n1", client, lambda: inv, resources=SERVED, checkpoint=checkpoint)


def ids(n: int) -> list[list[str]]:
    return [[f"x-{k}" for k in range(n)]]


def test_multi_container_pod_same_amounts_each_gets_its_own(backend: FakeBackend) -> None:
    u = [g.uuid for g in backend.discover().gpus]
    p = pod("p", "n1", [
        ("a", {KOORD_GPU_CORE: 50, KOORD_GPU_MEMORY_RATIO: 50}, [gpu(0, u[0], 500, 8 * GIB, 500)]),
        ("b", {KOORD_GPU_CORE: 50, KOORD_GPU_MEMORY_RATIO: 50}, [gpu(3, u[3], 500, 8 * GIB, 500)]),
    ])
    client = MemoryClient([p])
    a = allocator(client, backend)
    first = a.allocate(CORE, ids(50))[0].envs
    assert first["NVIDIA_VISIBLE_DEVICES"] == u[0]
    assert first["DEVSHARE_GPU_MEMORY_LIMIT"] == str(8 * GIB) and first["DEVSHARE_GPU_CORE_LIMIT"] == "50"
    assert first["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m" and first["CUDA_DEVICE_SM_LIMIT"] == "50"
    # the second resource of the same container: still container a
    assert a.allocate(RATIO, ids(50))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[0]
    assert ASSIGNED not in client.pods[("default", "p")]["metadata"]["annotations"]
    assert a.allocate(CORE, ids(50))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[3]
    assert a.allocate(RATIO, ids(50))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[3]
    assert client.pods[("default", "p")]["metadata"]["annotations"][ASSIGNED] == "true"
    # assigned: no longer a candidate
    with pytest.raises(AllocateError, match="no pod on this node waits for 50"):
        a.allocate(CORE, ids(50))


def test_ambiguous_pods_are_refused_and_in_progress_pod_wins(backend: FakeBackend) -> None:
    u = [g.uuid for g in backend.discover().gpus]
    p1 = pod("p1", "n1", [("c", {nvidia.NVIDIA_GPU: 1}, [gpu(1, u[1])]), ("d", {nvidia.NVIDIA_GPU: 1}, [gpu(2, u[2])])])
    p2 = pod("p2", "n1", [("c", {nvidia.NVIDIA_GPU: 1}, [gpu(5, u[5])])])
    client = MemoryClient([p1, p2])
    a = allocator(client, backend)
    with pytest.raises(AllocateError, match=r"ambiguous.*default/p1/c.*default/p2/c"):
        a.allocate(NVIDIA, ids(1))
    # kubelet knows which pod it is admitting; once one is in progress, the agent knows too
    client.pods[("default", "p2")]["status"]["phase"] = "Failed"
    assert a.allocate(NVIDIA, ids(1))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[1]
    client.pods[("default", "p2")]["status"]["phase"] = "Pending"
    assert a.allocate(NVIDIA, ids(1))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[2]
    assert client.pods[("default", "p1")]["metadata"]["annotations"][ASSIGNED] == "true"
    assert a.allocate(NVIDIA, ids(1))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[5]


def test_amount_tells_pods_apart(backend: FakeBackend) -> None:
    u = [g.uuid for g in backend.discover().gpus]
    client = MemoryClient([
        pod("small", "n1", [("c", {aliyun.ALIYUN_GPU_MEM: 4096}, [gpu(0, u[0], 250, 4 * GIB)])],
            annotations={aliyun.ALIYUN_ASSIGNED: "false", aliyun.ALIYUN_IDX: "0"}),
        pod("big", "n1", [("c", {aliyun.ALIYUN_GPU_MEM: 8192}, [gpu(0, u[0], 500, 8 * GIB)])]),
    ])
    a = allocator(client, backend)
    envs = a.allocate(ALIYUN, ids(8192))[0].envs
    assert envs[aliyun.ALIYUN_POD] == "8192" and envs["ALIYUN_COM_GPU_MEM_CONTAINER"] == "8192"
    assert envs[aliyun.ALIYUN_DEV] == "16384" and envs[aliyun.ALIYUN_IDX] == "0"
    envs = a.allocate(ALIYUN, ids(4096))[0].envs
    assert envs[aliyun.ALIYUN_POD] == "4096"
    small = client.pods[("default", "small")]["metadata"]["annotations"]
    assert small[ASSIGNED] == "true" and small[aliyun.ALIYUN_ASSIGNED] == "true"


def test_no_match_and_foreign_pods_are_refused(backend: FakeBackend) -> None:
    u = [g.uuid for g in backend.discover().gpus]
    other_node = pod("elsewhere", "n2", [("c", {nvidia.NVIDIA_GPU: 1}, [gpu(0, u[0])])])
    running = pod("running", "n1", [("c", {nvidia.NVIDIA_GPU: 1}, [gpu(0, u[0])])], phase="Running")
    no_alloc = pod("plain", "n1", [("c", {nvidia.NVIDIA_GPU: 1}, [])])
    del no_alloc["metadata"]["annotations"][names.ALLOCATION]
    client = MemoryClient([other_node, running, no_alloc])
    with pytest.raises(AllocateError, match="no pending pod with a devshare allocation"):
        allocator(client, backend).allocate(NVIDIA, ids(1))
    client.add(pod("two", "n1", [("c", {nvidia.NVIDIA_GPU: 2}, [gpu(0, u[0]), gpu(1, u[1])])]))
    with pytest.raises(AllocateError, match="default/two/c asks 2"):
        allocator(client, backend).allocate(NVIDIA, ids(1))


def test_stale_device_object_is_refused(backend: FakeBackend) -> None:
    client = MemoryClient([pod("p", "n1", [("c", {nvidia.NVIDIA_GPU: 1}, [gpu(0, "GPU-not-this-card")])])])
    with pytest.raises(AllocateError, match="Device object is stale"):
        allocator(client, backend).allocate(NVIDIA, ids(1))
    client = MemoryClient([pod("p", "n1", [("c", {nvidia.NVIDIA_GPU: 1}, [gpu(42, "")])])])
    with pytest.raises(AllocateError, match="minor 42"):
        allocator(client, backend).allocate(NVIDIA, ids(1))


def test_group_pod_visible_and_cuda_devices(backend: FakeBackend) -> None:
    u = [g.uuid for g in backend.discover().gpus]
    p = pod("w0", "n1", [("main", {nvidia.NVIDIA_GPU: 2}, [gpu(4, u[4]), gpu(5, u[5])])],
            annotations=encode_topology({0: [4, 5]}, [4, 5, 6, 7]))
    envs = allocator(MemoryClient([p]), backend).allocate(NVIDIA, ids(2))[0].envs
    assert envs["NVIDIA_VISIBLE_DEVICES"] == ",".join(u[4:8])
    assert envs["CUDA_VISIBLE_DEVICES"] == f"{u[4]},{u[5]}"
    assert "DEVSHARE_GPU_MEMORY_LIMIT" not in envs  # whole cards: nothing to isolate


def test_rdma_devices_and_files(backend: FakeBackend) -> None:
    from devshare.model.allocation import DeviceGrant

    rdma = resource_named(KOORD_RDMA)
    assert rdma is not None
    p = pod("r", "n1", [("c", {KOORD_RDMA: 100},
                         [DeviceGrant(type="rdma", minor=0, id="mlx5_0", core_milli=1000)])])
    got = allocator(MemoryClient([p]), backend).allocate(rdma, ids(100))[0]
    assert got.envs == {"DEVSHARE_RDMA_DEVICES": "mlx5_0"}
    assert got.device_files == ("/dev/infiniband/uverbs0",)


def test_restarted_agent_learns_progress_from_kubelet_checkpoint(backend: FakeBackend, tmp_path: Path) -> None:
    import json

    u = [g.uuid for g in backend.discover().gpus]
    p1 = pod("p1", "n1", [("a", {nvidia.NVIDIA_GPU: 1}, [gpu(0, u[0])]), ("b", {nvidia.NVIDIA_GPU: 1}, [gpu(1, u[1])])])
    p2 = pod("p2", "n1", [("a", {nvidia.NVIDIA_GPU: 1}, [gpu(2, u[2])])])
    cp = tmp_path / "cp"
    cp.write_text(json.dumps({"Data": {"PodDeviceEntries": [
        {"PodUID": "uid-p1", "ContainerName": "a", "ResourceName": nvidia.NVIDIA_GPU, "DeviceIDs": {"0": [u[0]]}}]}}))
    a = allocator(MemoryClient([p1, p2]), backend, checkpoint=cp)
    # p1/a was allocated before the restart: the call is p1/b's (p1 is in progress), not p2/a's
    assert a.allocate(NVIDIA, ids(1))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[1]


def test_dead_half_allocated_pod_does_not_attract_the_next_call(backend: FakeBackend) -> None:
    u = [g.uuid for g in backend.discover().gpus]
    now = [0.0]
    p1 = pod("p1", "n1", [("a", {nvidia.NVIDIA_GPU: 1}, [gpu(0, u[0])]), ("b", {nvidia.NVIDIA_GPU: 1}, [gpu(1, u[1])])])
    p2 = pod("p2", "n1", [("a", {nvidia.NVIDIA_GPU: 1}, [gpu(2, u[2])])])
    inv = backend.discover()
    a = Allocator("n1", MemoryClient([p1]), lambda: inv, resources=SERVED, clock=lambda: now[0])
    assert a.allocate(NVIDIA, ids(1))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[0]
    # p1 then failed elsewhere (another plugin); its phase is not Failed yet when p2 arrives, long after
    a.client.add(p2)  # type: ignore[attr-defined]
    now[0] = 120.0
    with pytest.raises(AllocateError, match="ambiguous"):
        a.allocate(NVIDIA, ids(1))
    # that refusal also buried p1: p2 is served now
    assert a.allocate(NVIDIA, ids(1))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[2]


def test_refusal_mid_pod_abandons_it(backend: FakeBackend) -> None:
    u = [g.uuid for g in backend.discover().gpus]
    p1 = pod("p1", "n1", [("a", {nvidia.NVIDIA_GPU: 1}, [gpu(0, u[0])]), ("b", {nvidia.NVIDIA_GPU: 2}, [gpu(1, u[1])])])
    client = MemoryClient([p1])
    a = allocator(client, backend)
    a.allocate(NVIDIA, ids(1))
    with pytest.raises(AllocateError):
        a.allocate(NVIDIA, ids(3))  # not what p1/b asks: kubelet gives up on p1
    client.add(pod("p2", "n1", [("a", {nvidia.NVIDIA_GPU: 2}, [gpu(5, u[5])])]))
    assert a.allocate(NVIDIA, ids(2))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[5]


# ---- property: whatever kubelet does, a container never gets another container's devices

RESOURCES: list[PluginResource] = [CORE, RATIO, NVIDIA]

container_st = st.tuples(
    st.dictionaries(st.sampled_from([r.name for r in RESOURCES]), st.integers(1, 3), max_size=3),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    pods=st.lists(st.lists(container_st, min_size=1, max_size=3), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_never_a_wrong_container(tmp_path: Path, pods: list[list[tuple[dict[str, int]]]], seed: int) -> None:
    rng = random.Random(seed)
    inv = FakeBackend(write_fake(tmp_path / "big.yaml", gpus=16), node="n1").discover()
    objs = []
    want: dict[tuple[int, int], str] = {}  # every container gets its own card, to see who got what
    for i, containers in enumerate(pods):
        spec = []
        for j, (amounts,) in enumerate(containers):
            g = inv.gpus[len(want)]
            want[(i, j)] = g.uuid
            spec.append((f"c{j}", amounts, [gpu(g.minor, "", 500)] if amounts else []))
        objs.append(pod(f"p{i}", "n1", spec))
    client = MemoryClient(objs)
    a = Allocator("n1", client, lambda: inv, resources=[r.name for r in RESOURCES])
    order = list(range(len(pods)))
    rng.shuffle(order)  # kubelet admits pods in its own order, one at a time
    refused = 0
    for i in order:
        failed = False
        for j, (amounts,) in enumerate(pods[i]):
            names_ = list(amounts)
            rng.shuffle(names_)  # the resources of a container come in map order
            for name in names_:
                res = next(r for r in RESOURCES if r.name == name)
                try:
                    got = a.allocate(res, ids(amounts[name]))[0].envs["NVIDIA_VISIBLE_DEVICES"]
                except AllocateError:
                    failed = True
                    break
                assert got == want[(i, j)], f"p{i}/c{j} got another container's card"
            if failed:
                break
        if failed:  # kubelet fails the pod's admission and moves on (the API may learn it later)
            refused += 1
            if rng.random() < 0.5:
                client.pods[("default", f"p{i}")]["status"]["phase"] = "Failed"
    if len(pods) == 1:  # a lone pod is never refused, and ends assigned when it asked for anything
        assert refused == 0
        ann = client.pods[("default", "p0")]["metadata"]["annotations"]
        assert ann.get(ASSIGNED) == ("true" if any(c[0] for c in pods[0]) else None)


def test_a_refusal_after_a_stand_in_does_not_bury_the_stand_in(backend: FakeBackend, tmp_path: Path) -> None:
    """A stand-in's devices went to some identical pod K whose admission then failed: K is dead, the
    stand-in is not (it was never admitted) and must still be found when kubelet admits it."""
    import json

    u = [g.uuid for g in backend.discover().gpus]
    cp = tmp_path / "cp"
    cp.write_text(json.dumps({"Data": {"PodDeviceEntries": []}}))
    twins = [pod(f"r{i}", "n1", [("c", {KOORD_GPU_CORE: 30}, [gpu(i, u[i], 300)])]) for i in range(2)]
    for i, p in enumerate(twins):
        p["status"]["conditions"] = [{"type": "PodScheduled", "status": "True",
                                      "lastTransitionTime": f"2026-01-01T00:00:0{i}Z"}]
    inv = backend.discover()
    a = Allocator("n1", MemoryClient(twins), lambda: inv, resources=SERVED, checkpoint=cp,
                  journal=tmp_path / "journal.json")
    assert a.allocate(CORE, ids(30))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[0]  # r0 stands in
    assert [h.standin for h in a.journal.handouts] == ["uid-r0"]
    with pytest.raises(AllocateError):
        a.allocate(RATIO, ids(7))  # kubelet's pod asked for something else too: it fails admission
    assert not a.journal.handouts and "uid-r0" not in a.abandoned
    assert a.allocate(CORE, ids(30))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[0]


def test_no_stand_in_while_kubelets_checkpoint_cannot_be_read(backend: FakeBackend, tmp_path: Path) -> None:
    """Nothing would settle a stand-in then: identical pods are refused, as without trades."""
    u = [g.uuid for g in backend.discover().gpus]
    cp = tmp_path / "cp"
    cp.write_text("{broken")
    twins = [pod(f"r{i}", "n1", [("c", {KOORD_GPU_CORE: 30}, [gpu(i, u[i], 300)])]) for i in range(2)]
    inv = backend.discover()
    a = Allocator("n1", MemoryClient(twins), lambda: inv, resources=SERVED, checkpoint=cp)
    with pytest.raises(AllocateError, match="ambiguous"):
        a.allocate(CORE, ids(30))
    cp.write_text('{"Data": {"PodDeviceEntries": []}}')
    assert a.allocate(CORE, ids(30))[0].envs["NVIDIA_VISIBLE_DEVICES"] in (u[0], u[1])


def test_a_checkpoint_that_appears_after_the_agent_started_is_used(backend: FakeBackend, tmp_path: Path) -> None:
    """Issue 39: on a fresh node there is no checkpoint when the agent starts; kubelet writes it once a
    plugin has listed its devices. The agent reads it at every call, so stand-ins start with it."""
    u = [g.uuid for g in backend.discover().gpus]
    cp = tmp_path / "kubelet_internal_checkpoint"
    twins = [pod(f"r{i}", "n1", [("c", {KOORD_GPU_CORE: 30}, [gpu(i, u[i], 300)])]) for i in range(2)]
    inv = backend.discover()
    a = Allocator("n1", MemoryClient(twins), lambda: inv, resources=SERVED, checkpoint=cp)
    with pytest.raises(AllocateError, match="ambiguous"):  # nothing could settle a stand-in yet
        a.allocate(CORE, ids(30))
    cp.write_text('{"Data": {"PodDeviceEntries": [], "RegisteredDevices": {}}, "Checksum": 1}')
    assert a.allocate(CORE, ids(30))[0].envs["NVIDIA_VISIBLE_DEVICES"] in (u[0], u[1])
    assert a.readable and len(a.journal.handouts) == 1


def test_a_kubelet_restart_forgets_what_its_checkpoint_does_not_show(backend: FakeBackend, tmp_path: Path) -> None:
    """kubelet got the answer for container a but died before writing its checkpoint: the new kubelet
    asks for a again, and the agent must not think a was served (it would hand a's call to b)."""
    import json

    u = [g.uuid for g in backend.discover().gpus]
    cp = tmp_path / "cp"
    cp.write_text(json.dumps({"Data": {"PodDeviceEntries": []}}))
    p = pod("p", "n1", [("a", {KOORD_GPU_CORE: 50}, [gpu(0, u[0], 500)]),
                        ("b", {KOORD_GPU_CORE: 50}, [gpu(3, u[3], 500)])])
    inv = backend.discover()
    a = Allocator("n1", MemoryClient([p]), lambda: inv, resources=SERVED, checkpoint=cp)
    assert a.allocate(CORE, ids(50))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[0]
    a.kubelet_restarted()
    assert a.allocate(CORE, ids(50))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[0]  # a again, not b
    # what the checkpoint shows survives a restart
    cp.write_text(json.dumps({"Data": {"PodDeviceEntries": [
        {"PodUID": "uid-p", "ContainerName": "a", "ResourceName": KOORD_GPU_CORE, "DeviceIDs": {"-1": ["x-0"]}}]}}))
    a.kubelet_restarted()
    assert a.allocate(CORE, ids(50))[0].envs["NVIDIA_VISIBLE_DEVICES"] == u[3]
