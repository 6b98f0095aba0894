"""``devshare schedule`` with DRA objects in the --cluster file (issue 38): claims placed by the same
engine, allocated claims counted beside extended-resource pods."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from devshare.cli.main import app
from devshare.model import dra
from support.schedule import node, pod

runner = CliRunner()


def template(name: str, compute: str, memory: str | None = None) -> dict[str, Any]:
    caps = {"compute": compute} | ({"memory": memory} if memory else {})
    return {"apiVersion": dra.API_VERSION, "kind": "ResourceClaimTemplate", "metadata": {"name": name,
                                                                                          "namespace": "default"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": dra.CLASS_GPU, "capacity": {"requests": caps}}}]}}}}


def claim_pod(name: str, tmpl: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": tmpl}],
                     "containers": [{"name": "main", "image": "x", "resources": {"claims": [{"name": "gpu"}]}}]}}


def share(name: str, core: str, memory: str) -> dict[str, Any]:
    return pod(name, {"koordinator.sh/gpu-core": core, "koordinator.sh/gpu-memory": memory})


def run(tmp_path: Path, cluster: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all(cluster))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all(pods))
    result = runner.invoke(app, ["schedule", "--cluster", str(tmp_path / "cluster.yaml"), str(tmp_path / "pods.yaml")])
    placements = list(json.loads(result.stdout)["placements"])
    # the exit codes of devshare schedule: 0 every pod placed, 1 some fit nowhere
    assert result.exit_code == (1 if any(p["node"] is None for p in placements) else 0), result.output
    return placements


def test_a_claim_template_for_30_percent_is_allocated_like_an_extended_resource_pod(tmp_path: Path) -> None:
    cluster = [*node("n1", 1), template("share", "30", "6Gi")]
    out = run(tmp_path, cluster, [claim_pod("a", "share"), share("b", "70", "2Gi"),
                                  share("c", "10", "1Gi")])
    a, b, c = out
    (res,) = a["claims"]["a-gpu"]["devices"]["results"]
    assert (a["node"], res["device"], res["consumedCapacity"]) == ("n1", "gpu-0", {"compute": "30", "memory": "6Gi"})
    assert b["node"] == "n1"  # 30% + 70%: the card is full
    assert c["node"] is None  # neither path double-books


def test_allocated_claims_in_the_file_are_counted(tmp_path: Path) -> None:
    taken = {"apiVersion": dra.API_VERSION, "kind": "ResourceClaim", "metadata": {"name": "k", "namespace": "ns"},
             "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
             "status": {"allocation": {"devices": {"results": [
                 {"request": "r", "driver": dra.DRIVER, "pool": "n1", "device": "gpu-0"}]},
                 "nodeSelector": dra.node_selector("n1")}}}
    out = run(tmp_path, [*node("n1", 1), taken], [share("p", "10", "1Gi")])
    assert out[0]["node"] is None


def test_a_claim_that_fits_nowhere_says_why(tmp_path: Path) -> None:
    out = run(tmp_path, [*node("n1", 1), template("big", "100", "32Gi")], [claim_pod("a", "big")])
    assert out[0]["node"] is None and "gpu" in out[0]["reason"]


def test_a_malformed_claim_in_the_cluster_file_is_one_error_line_naming_where(tmp_path: Path) -> None:
    bad = {"apiVersion": dra.API_VERSION, "kind": "ResourceClaim", "metadata": {"name": "k", "namespace": "ns"},
           "spec": {"devices": []}}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump_all([*node("n1", 1), bad]))
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump_all([share("p", "10", "1Gi")]))
    result = runner.invoke(app, ["schedule", "--cluster", str(tmp_path / "cluster.yaml"), str(tmp_path / "pods.yaml")])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'cluster.yaml'}, document 3: ResourceClaim ns/k: spec.devices: "
        "must be a mapping (requests, constraints, config), got []"]
