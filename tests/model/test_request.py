"""The request types every dialect is read into: what a device request takes of a card, which GPUs a
pod's selection allows (and why not), and what a pod asks as a whole."""

from __future__ import annotations

import pytest

from devshare.model.request import WHOLE, ContainerRequest, DeviceRequest, GpuSelection, PodRequest

GiB = 2**30
A100 = "NVIDIA A100-SXM4-80GB"


def gpu(count: int = 1, core: int = 0, memory: int = 0, ratio: int = 0) -> DeviceRequest:
    return DeviceRequest(type="gpu", count=count, core_milli=core, memory=memory, memory_ratio_milli=ratio)


def test_whole_is_all_compute_with_all_memory_or_none_asked() -> None:
    assert gpu(2, WHOLE, 0, WHOLE).whole
    assert gpu(1, WHOLE).whole
    assert DeviceRequest(type="rdma", core_milli=WHOLE).whole
    assert not gpu(1, 500, 0, 500).whole
    assert not gpu(1, WHOLE, 8 * GiB).whole  # bytes of memory: the card's rest can be shared
    assert not gpu(1, 0, 8 * GiB).whole


def test_memory_on_a_card_is_the_ratio_of_its_memory_or_the_bytes_asked() -> None:
    assert gpu(1, 500, 0, 250).memory_on(16 * GiB) == 4 * GiB
    assert gpu(1, 500, 0, 333).memory_on(1000) == 333  # rounded down, never above the card
    assert gpu(1, 500, 6 * GiB).memory_on(16 * GiB) == 6 * GiB
    assert gpu(1, 500).memory_on(16 * GiB) == 0


def test_a_container_request_by_type() -> None:
    c = ContainerRequest(name="c", devices=(gpu(1, 300), DeviceRequest(type="rdma", core_milli=500)))
    assert c.get("rdma") == DeviceRequest(type="rdma", core_milli=500)
    assert c.get("gpu") == gpu(1, 300)
    assert c.get("fpga") is None


@pytest.mark.parametrize(("selection", "device_id", "model", "why"), [
    (GpuSelection(use_ids=("GPU-a",)), "GPU-b", A100, "not one of its nvidia.com/use-gpuuuid"),
    (GpuSelection(avoid_ids=("GPU-a",)), "GPU-a", A100, "listed in its nvidia.com/nouse-gpuuuid"),
    (GpuSelection(use_types=("h100",)), "GPU-a", A100, f"of type {A100}, not one of its nvidia.com/use-gputype"),
    (GpuSelection(use_types=("h100",)), "GPU-a", "", "of type unknown, not one of its nvidia.com/use-gputype"),
    (GpuSelection(avoid_types=("a100",)), "GPU-a", A100, f"of type {A100}, listed in its nvidia.com/nouse-gputype"),
])
def test_why_a_gpu_is_not_selected(selection: GpuSelection, device_id: str, model: str, why: str) -> None:
    assert selection.why_not(device_id, model) == why
    assert not selection.allows(device_id, model)


def test_what_a_selection_allows() -> None:
    assert GpuSelection().allows("GPU-a", A100)
    assert GpuSelection(use_ids=("GPU-a",)).allows("GPU-a", "")
    assert GpuSelection(use_types=("A100", "H100")).allows("", A100)  # a case-insensitive substring
    assert GpuSelection(avoid_types=("T4",)).allows("GPU-a", "")  # an unknown model is avoided by no type
    assert GpuSelection(avoid_ids=("GPU-a",)).allows("", A100)


def test_a_selection_described_as_its_annotations() -> None:
    s = GpuSelection(use_types=("A100", "H100"), avoid_ids=("GPU-1",))
    assert s.describe() == "nvidia.com/nouse-gpuuuid: GPU-1; nvidia.com/use-gputype: A100,H100"
    assert GpuSelection().describe() == ""


def pod(*containers: ContainerRequest, init: tuple[ContainerRequest, ...] = ()) -> PodRequest:
    return PodRequest(namespace="ns", name="p", containers=containers, init_containers=init)


def test_what_a_pod_asks() -> None:
    rdma = DeviceRequest(type="rdma", core_milli=WHOLE)
    p = pod(ContainerRequest(name="a", devices=(gpu(1, 300),)), ContainerRequest(name="b"),
            ContainerRequest(name="c", devices=(rdma, gpu(2, WHOLE))),
            init=(ContainerRequest(name="i", devices=(DeviceRequest(type="fpga", core_milli=WHOLE),)),))
    assert p.key == "ns/p"
    assert p.device_types() == ("gpu", "rdma", "fpga")
    assert p.needs("gpu") == [(0, gpu(1, 300)), (2, gpu(2, WHOLE))]
    assert p.needs("fpga") == []  # init containers are placed by devshare.model.initplan
    assert p.has_devices()
    assert not pod(ContainerRequest(name="a")).has_devices()
    assert pod(init=(ContainerRequest(name="i", devices=(gpu(),)),)).has_devices()


def test_a_multi_card_share_is_a_share_over_several_gpus() -> None:
    assert pod(ContainerRequest(name="a", devices=(gpu(2, 500, 0, 500),))).multi_card_share()
    assert pod(init=(ContainerRequest(name="i", devices=(gpu(2, 500, 0, 500),)),)).multi_card_share()
    assert not pod(ContainerRequest(name="a", devices=(gpu(2, WHOLE, 0, WHOLE),))).multi_card_share()
    assert not pod(ContainerRequest(name="a", devices=(gpu(1, 500, 0, 500),))).multi_card_share()
    assert not pod(ContainerRequest(name="a", devices=(DeviceRequest(type="rdma", count=2, core_milli=500),))
                   ).multi_card_share()
