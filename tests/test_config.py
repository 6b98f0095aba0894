"""The configuration file: strict decoding, one-line errors naming the field, and every knob reaching
the engine (extender, ``devshare schedule``, webhook)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from typer.testing import CliRunner

from devshare.cli.main import app
from devshare.config import (
    API_VERSION,
    KIND,
    Configuration,
    Scheduling,
    load_config,
    parse_config,
    with_overrides,
)
from devshare.engine.build import build_engine, quotas_of, settings_of
from devshare.model.errors import InvalidInput
from devshare.server.extender.serve import ExtenderOptions
from devshare.server.webhook.validate import judge
from support import REPO

ROOT = REPO
SHIPPED = ROOT / "deploy" / "scheduler" / "config" / "devshare-config.yaml"
runner = CliRunner()


def doc(**sections: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, **sections}


@pytest.mark.parametrize(("data", "message"), [
    ({"scheduling": {"coreWeight": 120}}, "x.yaml: scheduling.coreWeight: expected int <= 100, got 120"),
    ({"scheduling": {"coreWeight": 0.2}}, "scheduling.coreWeight: expected int, got float (an integer percent"),
    ({"scheduling": {"coreWeigth": 20}}, "x.yaml: scheduling.coreWeigth: unknown field"),
    ({"bogus": 1}, "x.yaml: bogus: unknown field"),
    ({"deviceTypes": {"npu": True}}, "x.yaml: deviceTypes.npu: devshare has no dialect for npu devices: give the "
     "resource names pods ask for them with, e.g. npu: {resources: [koordinator.sh/npu]}"),
    ({"deviceTypes": {"npu": {"resourcs": ["a.io/npu"]}}}, "x.yaml: deviceTypes.npu.resourcs: unknown field"),
    ({"deviceTypes": {"npu": {"resources": ["kubernetes.io/npu"]}}}, "deviceTypes.npu.resources: 'kubernetes.io/npu' "
     "is not an extended resource name kube-scheduler can route to devshare"),
    ({"deviceTypes": {"npu": {"resources": ["nvidia.com/gpu"]}}},
     "deviceTypes.npu.resources: nvidia.com/gpu is already read by the nvidia dialect"),
    ({"deviceTypes": {"gpu": {"resources": ["a.io/gpu"]}}}, "deviceTypes.gpu: gpu's resource names are its dialects'"),
    ({"deviceTypes": {"NPU": {"resources": ["a.io/npu"]}}}, "deviceTypes.NPU: a device type is a lowercase name"),
    ({"deviceTypes": {"npu": 1}}, "deviceTypes.npu: expected bool | object, got int"),
    ({"scheduling": {"nodePolicy": "fast"}}, "scheduling.nodePolicy: unknown value 'fast' (use devshare, binpack"),
    ({"scheduling": {"scheduleMode": "uuid"}}, "scheduling.scheduleMode: unknown value 'uuid' (use index or id)"),
    ({"scheduling": {"topology": "yes"}}, "scheduling.topology: expected bool, got str"),
    ({"scheduling": {"maxContainersPerCard": 0}}, "scheduling.maxContainersPerCard: expected int >= 1, got 0"),
    ({"scheduling": {"assumeTTLSeconds": 0}}, "scheduling.assumeTTLSeconds: expected float > 0.0, got 0"),
    ({"policies": {"devshare": {"kappa": -1}}}, "policies.devshare.kappa: expected float >= 0.0, got -1"),
    ({"scheduling": []}, "x.yaml: scheduling: expected object, got array"),
])
def test_bad_fields_are_named(data: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput) as e:
        parse_config(doc(**data), "x.yaml")
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_version_and_kind_are_required() -> None:
    with pytest.raises(InvalidInput, match=r"x.yaml: apiVersion: must be devshare.io/v1alpha1, got 'v1'"):
        parse_config({"apiVersion": "v1", "kind": KIND}, "x.yaml")
    with pytest.raises(InvalidInput, match=r"x.yaml: kind: must be DevshareConfiguration, got 'Config'"):
        parse_config({"apiVersion": API_VERSION, "kind": "Config"}, "x.yaml")
    with pytest.raises(InvalidInput, match="expected a mapping"):
        parse_config([1], "x.yaml")


def test_command_line_flags_override_the_file() -> None:
    cfg = parse_config(doc(scheduling={"nodePolicy": "binpack", "cardPolicy": "spread", "coreWeight": 20}))
    assert with_overrides(cfg).scheduling == cfg.scheduling
    spread = with_overrides(cfg, policy="spread", core_weight=0.7, assume_ttl=5).scheduling
    assert (spread.node_policy, spread.card_policy, spread.core_weight, spread.assume_ttl_seconds) == (
        "spread", "spread", 70, 5)


def write(tmp_path: Path, data: Any, name: str = "devshare.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def test_bad_file_is_one_error_line_from_every_command(tmp_path: Path) -> None:
    bad = write(tmp_path, doc(scheduling={"dfsBudget": "many"}))
    for args in (["extender", "--cluster", "examples/cluster.yaml", "--port", "1"],
                 ["schedule", "--cluster", "examples/cluster.yaml", "examples/pods.yaml"],
                 ["webhook", "--tls-cert", "x", "--tls-key", "y"],
                 ["config", "check"]):
        where = len(args) if args[0] != "config" else 2
        argv = [*args[:where], *(["--config"] if args[0] != "config" else []), str(bad), *args[where:]]
        r = subprocess.run([sys.executable, "-m", "devshare.cli.main", *argv], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 2, (argv, r.stderr)
        assert r.stderr.strip() == f"error: {bad}: scheduling.dfsBudget: expected int, got str", argv
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    r = runner.invoke(app, ["config", "check", str(empty)])
    assert r.exit_code == 2 and "the file is empty" in r.output


RDMA_POD = """
apiVersion: v1
kind: Pod
metadata: {name: rdma, namespace: default}
spec:
  containers:
  - {name: main, resources: {limits: {koordinator.sh/rdma: "50"}}}
---
apiVersion: v1
kind: Pod
metadata: {name: gpu, namespace: default}
spec:
  containers:
  - {name: main, resources: {limits: {koordinator.sh/gpu-core: "30", koordinator.sh/gpu-memory: 6Gi}}}
"""


def test_schedule_honours_the_file(tmp_path: Path) -> None:
    pods = tmp_path / "pods.yaml"
    pods.write_text(RDMA_POD)
    cfg = write(tmp_path, doc(deviceTypes={"rdma": False}))
    r = runner.invoke(app, ["schedule", "--config", str(cfg), "--cluster", "examples/cluster.yaml", str(pods)])
    assert r.exit_code == 2, r.output  # a pod of a disabled type: the webhook would refuse it (bad input)
    placed = {p["pod"]: p for p in json.loads(r.output)["placements"]}
    assert placed["default/rdma"]["node"] is None
    assert "deviceTypes.rdma: false" in placed["default/rdma"]["reason"]
    assert placed["default/gpu"]["node"] is not None
    r = runner.invoke(app, ["schedule", "--cluster", "examples/cluster.yaml", str(pods)])
    assert json.loads(r.output)["placements"][0]["node"] == "gpu-node-1"


def test_webhook_refuses_disabled_types() -> None:
    pod = yaml.safe_load(RDMA_POD.split("---")[0])
    assert judge(pod) == []
    (problem,) = judge(pod, None, frozenset({"rdma"}))
    assert "deviceTypes.rdma: false" in problem.message


def test_the_shipped_configmap_is_valid_and_complete() -> None:
    cfg = load_config(SHIPPED)
    # shipped with the defaults, every field spelled out, the shortlist on (one node per pod) and the
    # steering taint on (issue 41)
    assert cfg == msgspec.structs.replace(Configuration(), scheduling=Scheduling(shortlist=1, steer_other_pods=True))
    text = SHIPPED.read_text()
    for field in ("deviceTypes", "dialects", "nodePolicy", "cardPolicy", "coreWeight", "scheduleMode",
                  "maxContainersPerCard", "topology", "dfsBudget", "assumeTTLSeconds", "shortlist", "steerOtherPods",
                  "policies", "quotas"):
        assert f"{field}:" in text, field


NPU_CLUSTER = """
apiVersion: v1
kind: Node
metadata: {name: npu-node}
---
apiVersion: devshare.io/v1alpha1
kind: Device
metadata: {name: npu-node}
spec:
  devices:
  - {type: npu, minor: 0, id: NPU-0, resources: {koordinator.sh/npu: "100"}}
"""
NPU_PODS = """
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: default}
spec:
  containers:
  - {name: main, resources: {limits: {koordinator.sh/npu: "50"}}}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: default}
spec:
  containers:
  - {name: main, resources: {limits: {koordinator.sh/npu: "60"}}}
"""


def test_a_device_type_without_a_dialect_works_from_the_file_or_is_refused(tmp_path: Path) -> None:
    """Issue 13: ``koordinator.sh/npu: 50`` was placed with ``devices: []``. Configured, the npu share is
    placed and reserved (the second pod does not fit beside it); not configured, both are refused and
    told how to configure the type."""
    (tmp_path / "cluster.yaml").write_text(NPU_CLUSTER)
    (tmp_path / "pods.yaml").write_text(NPU_PODS)
    args = ["schedule", "--cluster", str(tmp_path / "cluster.yaml"), str(tmp_path / "pods.yaml")]
    r = runner.invoke(app, args)
    placed = {p["pod"]: p for p in json.loads(r.output)["placements"]}
    for key in ("default/a", "default/b"):
        assert placed[key]["node"] is None
        assert "no dialect of devshare reads: nodes list npu devices" in placed[key]["reason"]
    cfg = write(tmp_path, doc(deviceTypes={"npu": {"resources": ["koordinator.sh/npu"]}}))
    r = runner.invoke(app, [*args, "--config", str(cfg)])
    assert r.exit_code == 1, r.output  # b fits nowhere
    a, b = json.loads(r.output)["placements"]
    assert a["node"] == "npu-node"
    (device,) = json.loads(a["annotations"]["devshare.io/allocation"])["containers"][0]["devices"]
    assert (device["type"], device["id"], device["share"]) == ("npu", "NPU-0", 50)
    assert b["node"] is None and "npu 0: 50% compute free, 60% asked" in b["reason"]


MGPU_POD = """
apiVersion: v1
kind: Pod
metadata: {name: mgpu, namespace: default}
spec:
  containers:
  - {name: main, resources: {limits: {vke.volcengine.com/mgpu-core: "30", vke.volcengine.com/mgpu-memory: "1024"}}}
"""


def test_seed_000_switches_reach_the_scheduler(tmp_path: Path) -> None:
    """MGPUEnable (dialects.mgpu), MGPUScheduleMode (scheduleMode: id writes the GPUs' UUIDs in the mGPU
    annotations), MGPUMaxContainersPerCard, MGPUWeightOfCore and MGPUPolicy, through devshare schedule."""
    pods = tmp_path / "pods.yaml"
    pods.write_text(MGPU_POD)
    args = ["schedule", "--cluster", "examples/cluster.yaml", str(pods)]
    off = write(tmp_path, doc(dialects={"mgpu": False}), "off.yaml")
    (placed,) = json.loads(runner.invoke(app, [*args, "--config", str(off)]).output)["placements"]
    assert placed["node"] is None
    assert placed["reason"] == (
        "asks for vke.volcengine.com/mgpu-core, vke.volcengine.com/mgpu-memory in the mgpu dialect, which devshare's "
        "configuration disables (dialects.mgpu: false (seed 000's MGPUEnable: false)): ask in an enabled dialect, "
        "or enable it")
    by_id = write(tmp_path, doc(scheduling={"scheduleMode": "id"}), "id.yaml")
    (placed,) = json.loads(runner.invoke(app, [*args, "--config", str(by_id)]).output)["placements"]
    ann = placed["annotations"]
    (device,) = json.loads(ann["devshare.io/allocation"])["containers"][0]["devices"]
    assert device["id"].startswith("GPU-")
    assert ann["vke.volcengine.com/gpu-index-container-main"] == device["id"]
    (placed,) = json.loads(runner.invoke(app, args).output)["placements"]
    assert placed["annotations"]["vke.volcengine.com/gpu-index-container-main"] == str(device["minor"])
    cfg = parse_config(doc(dialects={"mgpu": False},
                           scheduling={"maxContainersPerCard": 4, "coreWeight": 20, "cardPolicy": "spread"}))
    assert cfg.disabled_dialects() == {"mgpu"} and build_engine(cfg).state.max_containers == 4
    assert settings_of(cfg).core_weight == pytest.approx(0.2) and not settings_of(cfg).card_binpack
    (problem,) = judge(yaml.safe_load(MGPU_POD), None, frozenset(), cfg.disabled_dialects())
    assert "dialects.mgpu: false" in problem.message and problem.reason == "dialect"


def test_unknown_dialect_switch_is_named() -> None:
    with pytest.raises(InvalidInput, match=r"x.yaml: dialects.volcano: unknown dialect: use one of koordinator, "
                                           r"nvidia, mgpu, aliyun"):
        parse_config(doc(dialects={"volcano": False}), "x.yaml")


async def test_the_extender_refuses_a_disabled_dialect() -> None:
    from support.extender import cluster, names_body, post, running

    pod = yaml.safe_load(MGPU_POD)
    cfg = parse_config(doc(dialects={"mgpu": False}))
    async with running(cluster(1, pods=[pod]), ExtenderOptions(config=cfg)) as (client, _):
        out = await post(client, "/filter", names_body(pod, ["node-0"]))
        assert out["NodeNames"] == [] and "dialects.mgpu: false" in out["FailedAndUnresolvableNodes"]["node-0"]


async def test_namespace_quotas_from_the_file_reach_the_extender() -> None:
    from support.extender import bind, cluster, names_body, pod, post, running

    cfg = parse_config(doc(quotas={"team-a": {"gpuCore": 60}}))
    pods = [pod("a", core=40, ns="team-a"), pod("b", core=40, ns="team-a"), pod("c", core=40, ns="team-b")]
    async with running(cluster(2, pods=pods), ExtenderOptions(config=cfg)) as (client, _):
        assert await bind(client, "a", "node-0", ns="team-a") == ""
        out = await post(client, "/filter", names_body(pods[1], ["node-0", "node-1"]))
        assert out["NodeNames"] == []
        assert out["FailedAndUnresolvableNodes"]["node-0"] == (
            "namespace team-a: gpu core quota 60 percent used 40 percent, asks 40 percent")
        assert "gpu core quota" in await bind(client, "b", "node-1", ns="team-a")
        assert await bind(client, "c", "node-1", ns="team-b") == ""


def test_bad_quotas_are_named() -> None:
    with pytest.raises(InvalidInput, match=r"x.yaml: quotas.team-a.gpuMemory: 'lots' is not a Kubernetes quantity"):
        parse_config(doc(quotas={"team-a": {"gpuMemory": "lots"}}), "x.yaml")
    with pytest.raises(InvalidInput, match=r"x.yaml: quotas.team-a.gpuCore: expected int >= 0, got -5"):
        parse_config(doc(quotas={"team-a": {"gpuCore": -5}}), "x.yaml")
    with pytest.raises(InvalidInput, match=r"x.yaml: quotas.Team_A: a namespace name is a DNS label"):
        parse_config(doc(quotas={"Team_A": {"gpuCore": 5}}), "x.yaml")
    q = quotas_of(parse_config(doc(quotas={"team-a": {"gpuCore": 250, "gpuMemory": "64Gi"}})))
    assert q is not None and q.limits["team-a"].core_milli == 2500 and q.limits["team-a"].memory == 64 * 2**30
    assert quotas_of(Configuration()) is None
