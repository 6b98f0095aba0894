"""The Koordinator dialect's reader: current Koordinator's asks (gpu.shared split over the cards,
whole multiples above 100 on any node)."""

from __future__ import annotations

from devshare.engine.scheduler import Scheduler
from devshare.engine.state import ClusterState
from devshare.model.device import DeviceInfo, NodeDevices
from devshare.model.node import node_info_from_labels
from devshare.model.pod import parse_pod, validate_pod
from devshare.model.request import DeviceRequest

# --- issue 36: current Koordinator's asks, the id beside the minor, pods Koordinator placed
# (koordinator-sh/koordinator a7a1b76b: pkg/scheduler/plugins/deviceshare/utils.go ValidDeviceResourceCombinations,
# devicehandler_gpu.go calcDesiredRequestsAndCountForGPU, pkg/webhook/pod/validating/verify_device_resource.go,
# plugin.go fillID, apis/extension/device_share.go DeviceAllocation)


def _pod36(limits: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}


def test_gpu_shared_splits_the_amounts_over_the_cards() -> None:
    req = parse_pod(_pod36({"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "100",
                            "koordinator.sh/gpu-memory": "16Gi"}))
    assert req.dialect == "koordinator"
    assert req.containers[0].devices == (DeviceRequest(type="gpu", count=2, core_milli=500, memory=8 * 2**30),)
    req = parse_pod(_pod36({"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-memory-ratio": "100"}))
    assert req.containers[0].devices == (DeviceRequest(type="gpu", count=2, memory_ratio_milli=500),)
    assert parse_pod(_pod36({"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "200",
                             "koordinator.sh/gpu-memory-ratio": "200"})).containers[0].devices[0].whole
    for limits, words in [
        ({"koordinator.sh/gpu.shared": "2"}, "needs the memory it shares"),
        ({"koordinator.sh/gpu.shared": "3", "koordinator.sh/gpu-core": "100", "koordinator.sh/gpu-memory-ratio": "30"},
         "multiple of koordinator.sh/gpu.shared=3"),
        ({"koordinator.sh/gpu.shared": "2", "koordinator.sh/gpu-core": "300", "koordinator.sh/gpu-memory-ratio": "100"},
         "more than 100"),
        ({"koordinator.sh/gpu.shared": "1", "koordinator.sh/gpu": "50"}, "cannot be asked together"),
        ({"koordinator.sh/gpu.shared": "-1", "koordinator.sh/gpu-memory-ratio": "10"}, "1 or more"),
    ]:
        problems = validate_pod(_pod36(limits))
        assert any(words in p for p in problems), (limits, problems)


def test_above_100_in_whole_multiples_is_whole_cards_on_any_node() -> None:
    st = ClusterState()
    st.upsert_node(node_info_from_labels("plain"))  # no mGPU multi-card label
    st.set_devices(NodeDevices(node="plain", devices=tuple(
        DeviceInfo(type="gpu", minor=i, id=f"G{i}", memory=40 * 2**30) for i in range(2))))
    pod = parse_pod(_pod36({"koordinator.sh/gpu-core": "200", "koordinator.sh/gpu-memory": "64Gi"}))
    placed = Scheduler(st).place(pod)
    assert placed is not None and all(u.whole for u in placed.allocation.usage())
    assert Scheduler(st).place(parse_pod(_pod36({"nvidia.com/gpu": "2"}))) is not None
