"""What the configuration refuses of a pod before any node is looked at (engine/refusals.py): a disabled
device type, a disabled dialect, a device type some Device lists but no dialect reads. Each refusal
says what is refused and how to fix it; a pod that asks for none of them is not refused."""

from __future__ import annotations

from devshare.engine.refusals import Refusals, refuse_dialects, refuse_disabled, refuse_unconfigured
from devshare.model.dialects import koordinator_names, mgpu, nvidia
from devshare.model.pod import parse_pod
from support.webhook_pods import pod


def test_a_disabled_dialect_is_named_with_the_switch_to_turn() -> None:
    asks = pod({mgpu.MGPU_CORE: "50", mgpu.MGPU_MEMORY: "1024"})
    reason = refuse_dialects(asks, frozenset({"mgpu"}))
    assert reason is not None and mgpu.MGPU_CORE in reason
    assert "dialects.mgpu: false (seed 000's MGPUEnable: false)" in reason and "enable it" in reason
    assert refuse_dialects(asks, frozenset({"aliyun"})) is None
    assert refuse_dialects(pod({nvidia.NVIDIA_GPU: "1"}), frozenset({"mgpu"})) is None


def test_a_disabled_device_type_is_named() -> None:
    reason = refuse_disabled(["gpu", "rdma"], frozenset({"rdma"}))
    assert reason is not None and "asks for rdma" in reason and "deviceTypes.rdma: false" in reason
    assert refuse_disabled(["gpu"], frozenset({"rdma"})) is None


def test_a_type_no_dialect_reads_is_refused_only_where_devices_list_it() -> None:
    asks = pod({"koordinator.sh/npu": "1"})
    assert refuse_unconfigured(asks, None) is None  # no Device lists an npu: none of devshare's business
    reason = refuse_unconfigured(asks, frozenset({"gpu", "npu"}))
    assert reason is not None and "no dialect of devshare reads" in reason
    assert "deviceTypes: {npu: {resources: [koordinator.sh/npu]}}" in reason


def test_refusals_bundle_the_configurations_rules() -> None:
    refusals = Refusals(disabled_types=frozenset({"gpu"}), disabled_dialects=frozenset({"mgpu"}))
    share = pod({koordinator_names.KOORD_GPU_CORE: "50", koordinator_names.KOORD_GPU_MEMORY_RATIO: "50"})
    assert refusals.of_pod(share, frozenset({"gpu"})) is None
    reason = refusals.of_request(parse_pod(share))
    assert reason is not None and "deviceTypes.gpu: false" in reason
    assert Refusals().of_request(parse_pod(share)) is None
    assert "MGPUEnable" in (refusals.of_pod(pod({mgpu.MGPU_CORE: "50"}), None) or "")
