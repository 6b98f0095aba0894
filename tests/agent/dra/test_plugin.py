"""The DRA kubelet plugin over its real gRPC unix sockets, driven as kubelet drives it: the plugin
watcher's registration (GetInfo, NotifyRegistrationStatus), then NodePrepareResources and
NodeUnprepareResources for claims devshare allocated; the CDI spec holds what the device plugin
gives a container today. The node's ResourceSlice is ``test_node.py``'s."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from devshare.agent.dra import dra_v1_pb2 as pb
from devshare.agent.dra import dra_v1_pb2_grpc as pb_grpc
from devshare.agent.dra import pluginregistration_v1_pb2 as reg
from devshare.agent.dra import pluginregistration_v1_pb2_grpc as reg_grpc
from devshare.agent.dra.cdi import CdiSpecs
from devshare.agent.dra.plugin import DraPluginService, KubeletPlugin
from devshare.agent.fake import FakeBackend
from devshare.model import dra
from support.agent import write_fake


@pytest.fixture
def sockdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="dsdra", dir="/tmp"))  # unix socket paths must stay short
    yield d
    shutil.rmtree(d, ignore_errors=True)


def claim(name: str, uid: str, node: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": uid},
            "spec": {"devices": {"requests": []}},
            "status": {"allocation": {"devices": {"results": results}, "nodeSelector": dra.node_selector(node)}}}


def result(request: str, device: str, node: str = "n1", **consumed: str) -> dict[str, Any]:
    out: dict[str, Any] = {"request": request, "driver": dra.DRIVER, "pool": node, "device": device,
                           "shareID": "11111111-2222-3333-4444-555555555555"}
    if consumed:
        out["consumedCapacity"] = consumed
    return out


def test_registration_prepare_and_unprepare_over_grpc(sockdir: Path, tmp_path: Path) -> None:
    backend = FakeBackend(write_fake(tmp_path / "n.yaml", gpus=2, memory="16Gi"), node="n1")
    inv = backend.discover()
    u = [g.uuid for g in inv.gpus]
    claims = {"default/share": claim("share", "uid-share", "n1", [result("gpu", "gpu-0", compute="30", memory="6Gi")]),
              "default/whole": claim("whole", "uid-whole", "n1", [result("gpus", "gpu-0"), result("gpus", "gpu-1")]),
              "default/elsewhere": claim("elsewhere", "uid-x", "n2", [result("gpu", "gpu-0", node="n2")])}
    cdi = tmp_path / "cdi"
    plugin = KubeletPlugin("n1", lambda ns, n: claims.get(f"{ns}/{n}"), lambda: inv, cdi=CdiSpecs(cdi),
                           plugin_dir=sockdir / "plugin", registry_dir=sockdir / "registry")
    plugin.start()
    try:
        with grpc.insecure_channel(f"unix://{plugin.registry_socket}") as ch:
            stub = reg_grpc.RegistrationStub(ch)
            info = stub.GetInfo(reg.InfoRequest(), timeout=10)
            assert (info.type, info.name, info.endpoint) == ("DRAPlugin", dra.DRIVER, str(plugin.plugin_socket))
            assert list(info.supported_versions) == ["v1.DRAPlugin"]
            stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=10)
        assert plugin.registration.registered.is_set()
        with grpc.insecure_channel(f"unix://{plugin.plugin_socket}") as ch:
            stub = pb_grpc.DRAPluginStub(ch)
            out = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[
                pb.Claim(namespace="default", name="share", uid="uid-share"),
                pb.Claim(namespace="default", name="whole", uid="uid-whole"),
                pb.Claim(namespace="default", name="missing", uid="uid-missing"),
                pb.Claim(namespace="default", name="elsewhere", uid="uid-x")]), timeout=10)
            share = out.claims["uid-share"]
            assert not share.error
            (dev,) = share.devices
            assert (list(dev.request_names), dev.pool_name, dev.device_name) == (["gpu"], "n1", "gpu-0")
            assert dev.share_id == "11111111-2222-3333-4444-555555555555"
            (cdi_id,) = dev.cdi_device_ids
            assert cdi_id == "gpu.devshare.io/claim=uid-share-gpu"
            assert len(out.claims["uid-whole"].devices) == 2
            assert "does not exist" in out.claims["uid-missing"].error
            assert "not n1" in out.claims["uid-x"].error
            spec = json.loads(CdiSpecs(cdi).path("uid-share").read_text())
            env = dict(e.split("=", 1) for e in spec["devices"][0]["containerEdits"]["env"])
            assert env["NVIDIA_VISIBLE_DEVICES"] == u[0]
            assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "6144m" and env["CUDA_DEVICE_SM_LIMIT"] == "30"
            whole = json.loads(CdiSpecs(cdi).path("uid-whole").read_text())
            wenv = dict(e.split("=", 1) for e in whole["devices"][0]["containerEdits"]["env"])
            assert wenv["NVIDIA_VISIBLE_DEVICES"] == ",".join(u) and "CUDA_DEVICE_SM_LIMIT" not in wenv
            # kubelet retries: preparing again gives the same answer
            again = stub.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[
                pb.Claim(namespace="default", name="share", uid="uid-share")]), timeout=10)
            assert again.claims["uid-share"] == share
            un = stub.NodeUnprepareResources(pb.NodeUnprepareResourcesRequest(claims=[
                pb.Claim(namespace="default", name="share", uid="uid-share")]), timeout=10)
            assert not un.claims["uid-share"].error
            assert not CdiSpecs(cdi).path("uid-share").exists()
    finally:
        plugin.stop()



def test_a_malformed_claim_is_refused_with_a_reason_not_a_crash(tmp_path: Path) -> None:
    backend = FakeBackend(write_fake(tmp_path / "n.yaml", gpus=1, memory="16Gi"), node="n1")
    inv = backend.discover()
    good = claim("badspec", "uid-badspec", "n1", [result("gpu", "gpu-0")])
    claims: dict[str, Any] = {"default/nometa": {**good, "metadata": "c"},
                              "default/badspec": {**good, "spec": "q"},
                              "default/notamapping": ["c"]}
    service = DraPluginService("n1", lambda ns, n: claims.get(f"{ns}/{n}"), lambda: inv, CdiSpecs(tmp_path / "cdi"))
    out = service.NodePrepareResources(pb.NodePrepareResourcesRequest(claims=[
        pb.Claim(namespace="default", name=n, uid=f"uid-{n}") for n in ("nometa", "badspec", "notamapping")]),
        None)  # type: ignore[arg-type]  # the context is not read
    assert "no metadata mapping" in out.claims["uid-nometa"].error
    assert "spec" in out.claims["uid-badspec"].error and "must be a mapping" in out.claims["uid-badspec"].error
    assert "no metadata mapping" in out.claims["uid-notamapping"].error
