"""``devshare agent report --once``: the Device object, printed; bad input is one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from devshare.cli.main import app
from devshare.model.device import parse_device
from support.agent import TOPOLOGIES, write_fake

runner = CliRunner()


def test_report_once_json_from_a_shared_topology() -> None:
    path = TOPOLOGIES / "hgx-8gpu-nvswitch.json"
    result = runner.invoke(app, ["agent", "report", "--once", "--fake", str(path), "--node", "gpu-7", "-o", "json"])
    assert result.exit_code == 0, result.output
    obj = json.loads(result.stdout)
    assert obj["kind"] == "Device" and obj["metadata"]["name"] == "gpu-7"
    nd = parse_device(obj)
    assert len(nd.of_type("gpu")) == 8
    assert nd.gpu_bandwidth is not None and nd.gpu_bandwidth[0][7] == 450.0  # 18 NVLinks x 25 through NVSwitch


def test_report_once_yaml_with_node_from_env_and_bandwidth_override(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "from-env")
    f = write_fake(tmp_path / "n.yaml", gpus=2)
    bw = tmp_path / "bw.json"
    bw.write_text(json.dumps({"bandwidth_gbps": [[0, 11.5], [12, 0]]}))
    result = runner.invoke(app, ["agent", "report", "--once", "--fake", str(f), "--bandwidth", str(bw)])
    assert result.exit_code == 0, result.output
    obj = yaml.safe_load(result.stdout)
    assert obj["metadata"]["name"] == "from-env"
    assert json.loads(obj["spec"]["topologies"]["gpu"][0]["topology"]) == [[0.0, 11.5], [11.5, 0.0]]


def test_report_once_with_a_checkpoint(tmp_path: Path) -> None:
    f = write_fake(tmp_path / "n.yaml", gpus=[{"minor": 0, "uuid": "GPU-a"}, {"minor": 1, "uuid": "GPU-b"}])
    cp = tmp_path / "cp"
    cp.write_text(json.dumps({"Data": {"PodDeviceEntries": [
        {"PodUID": "u", "ContainerName": "c", "ResourceName": "nvidia.com/gpu", "DeviceIDs": ["GPU-b"]}]}}))
    result = runner.invoke(app, ["agent", "report", "--once", "--fake", str(f), "--node", "n", "--checkpoint",
                                 str(cp), "-o", "json"])
    assert result.exit_code == 0, result.output
    assert parse_device(json.loads(result.stdout)).held_outside == ("GPU-b",)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--fake", "/no/such/file.yaml"], "/no/such/file.yaml: no such file"),
        (["--fake", "{bad}"], "gpus must be a count"),
        (["--fake", "{good}", "-o", "xml"], "unknown output format 'xml'"),
        (["--fake", "{good}", "--bandwidth", "{bw}"], "neither bandwidth_gbps"),
        (["--fake", "{good}", "--bandwidth", "{good}"], "not valid JSON"),
        (["--fake", "{good}", "--checkpoint", "/no/such/dir/cp"], "--checkpoint /no/such/dir/cp: give kubelet's "
         "checkpoint file, in an existing folder"),
        (["--fake", "{good}", "--devices", "{rdma}"], "--devices cannot be combined with --fake"),
        (["--fake", "{good}", "--devices", "{badrdma}"], "id is missing"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: lots\n")
    good = write_fake(tmp_path / "good.yaml", gpus=2)
    (tmp_path / "bw.json").write_text('{"gpus": 2}')
    (tmp_path / "rdma.yaml").write_text("rdma: [mlx5_0]\n")
    (tmp_path / "badrdma.yaml").write_text("rdma: [{minor: 0}]\n")
    files = {"bad": bad, "good": good, "bw": tmp_path / "bw.json", "rdma": tmp_path / "rdma.yaml",
             "badrdma": tmp_path / "badrdma.yaml"}
    for key, path in files.items():
        args = [a.replace("{" + key + "}", str(path)) for a in args]
    result = runner.invoke(app, ["agent", "report", "--once", *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr


def test_report_once_before_kubelet_wrote_its_checkpoint(tmp_path: Path) -> None:
    """A checkpoint that does not exist yet is no error: kubelet writes it later (issue 39)."""
    f = write_fake(tmp_path / "n.yaml", gpus=1)
    result = runner.invoke(app, ["agent", "report", "--once", "--fake", str(f), "--node", "n", "--checkpoint",
                                 str(tmp_path / "kubelet_internal_checkpoint"), "-o", "json"])
    assert result.exit_code == 0, result.output


def test_the_checkpoint_defaults_to_the_plugin_dirs_and_need_not_exist(tmp_path: Path) -> None:
    from devshare.cli.agent import _checkpoint

    assert _checkpoint(None, tmp_path) == tmp_path / "kubelet_internal_checkpoint"
    assert _checkpoint(tmp_path / "cp") == tmp_path / "cp"


def test_agent_checkpoint_needs_its_folder(tmp_path: Path) -> None:
    good = write_fake(tmp_path / "good.yaml", gpus=2)
    result = runner.invoke(app, ["agent", "run", "--fake", str(good), "--plugin-dir", str(tmp_path),
                                 "--agent-checkpoint", "/no/such/dir/agent.json"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: --agent-checkpoint /no/such/dir/agent.json: its folder does not exist"


def test_nvml_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    broken = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def init() -> None:
        raise NVMLError("NVML Shared Library Not Found")

    broken.NVMLError = NVMLError  # type: ignore[attr-defined]
    broken.nvmlInit = init  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", broken)
    result = runner.invoke(app, ["agent", "report", "--once", "--node", "n"])
    assert result.exit_code == 2
    assert "NVML is not available (NVML Shared Library Not Found)" in result.stderr
    assert "--fake" in result.stderr
