"""The DRA kubelet plugin of driver ``gpu.devshare.io`` (``k8s.io/kubelet/pkg/apis/dra/v1``) and its
registration with kubelet's plugin watcher (``pluginregistration/v1``), each on its own unix socket.

``NodePrepareResources``: for each claim kubelet names, the claim is read from the API server and
its ``status.allocation`` results of this driver on this node are turned into what the device plugin
gives a container today (:mod:`devshare.agent.envs`: ``NVIDIA_VISIBLE_DEVICES``, the share limits
HAMi-core enforces, ``DEVSHARE_<TYPE>_DEVICES`` and device files), written as a CDI spec
(:mod:`.cdi`), one CDI device per request of the claim. kubelet hands the CDI device ids to the
container runtime. ``NodeUnprepareResources`` removes the claim's spec. Both are idempotent (kubelet
retries), and a claim that cannot be prepared gets its error in the response, never an exception.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]

from devshare.agent.dra import dra_v1_pb2 as pb
from devshare.agent.dra import dra_v1_pb2_grpc as pb_grpc
from devshare.agent.dra import pluginregistration_v1_pb2 as reg
from devshare.agent.dra import pluginregistration_v1_pb2_grpc as reg_grpc
from devshare.agent.dra.cdi import CdiSpecs
from devshare.agent.envs import container_devices
from devshare.agent.inventory import Inventory
from devshare.agent.matching import AllocateError, PendingPod
from devshare.model import dra
from devshare.model.allocation import ContainerAllocation, DeviceGrant, PodAllocation
from devshare.model.errors import InvalidInput
from devshare.model.request import WHOLE

log = logging.getLogger("devshare.agent.dra")

PLUGIN_DIR = Path("/var/lib/kubelet/plugins") / dra.DRIVER
REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
SERVICES = ["v1.DRAPlugin"]  # what kubelet's plugin manager asks for (the gRPC service, by API version)

ClaimReader = Callable[[str, str], dict[str, Any] | None]


def claim_devices(claim: dict[str, Any], node: str, inv: Inventory) -> tuple[PendingPod, list[dra.Result]]:
    """The claim's grants on ``node`` as an allocation the device plugin's environment builder takes
    (one "container" per request), and its results of this driver. Raises :class:`AllocateError`."""
    c = dra.parse_claim(claim)
    if c.allocation is None:
        raise AllocateError(f"claim {c.key} is not allocated")
    mine = [r for r in c.allocation.results if r.driver == dra.DRIVER]
    if c.allocation.node and c.allocation.node != node:
        raise AllocateError(f"claim {c.key} is allocated on node {c.allocation.node}, not {node}")
    per_request: dict[str, list[DeviceGrant]] = {}
    for r in mine:
        typed = dra.parse_device_name(r.device)
        if typed is None or r.pool != node:
            raise AllocateError(f"claim {c.key}: device {r.pool}/{r.device} is not one of this node's")
        dtype, minor = typed
        per_request.setdefault(r.request, []).append(_grant(dtype, minor, r, inv))
    alloc = PodAllocation(node=node, containers=tuple(ContainerAllocation(name=k, devices=tuple(v))
                                                      for k, v in per_request.items()))
    pod = PendingPod(uid=c.uid, namespace=c.namespace, name=c.name, containers=(), app_containers=(),
                     annotations={}, allocation=alloc)
    return pod, mine


def _grant(dtype: str, minor: int, r: dra.Result, inv: Inventory) -> DeviceGrant:
    share = r.consumed.get(dra.COMPUTE if dtype == "gpu" else dra.SHARE)
    core = dra.compute_milli(share) if share is not None else WHOLE
    memory = dra.memory_bytes(r.consumed[dra.MEMORY]) if dra.MEMORY in r.consumed else 0
    gpu = inv.gpu_by_minor(minor) if dtype == "gpu" else None
    if gpu is not None and memory == 0:
        memory = gpu.memory  # no memory consumed (a whole card, or compute alone): no memory limit
    return DeviceGrant(type=dtype, minor=minor, id=gpu.uuid if gpu is not None else "", core_milli=core,
                       memory=memory)


class DraPluginService(pb_grpc.DRAPluginServicer):
    def __init__(self, node: str, read_claim: ClaimReader, inventory: Callable[[], Inventory], cdi: CdiSpecs) -> None:
        self.node = node
        self.read_claim = read_claim
        self.inventory = inventory
        self.cdi = cdi
        self._lock = threading.Lock()

    def _prepare(self, ref: Any) -> pb.NodePrepareResourceResponse:
        try:
            claim = self.read_claim(ref.namespace, ref.name)
        except Exception as e:  # the API server unreachable: kubelet retries
            return pb.NodePrepareResourceResponse(error=f"cannot read claim {ref.namespace}/{ref.name}: {e}")
        if claim is None:
            return pb.NodePrepareResourceResponse(error=f"claim {ref.namespace}/{ref.name} does not exist")
        meta = claim.get("metadata") if isinstance(claim, dict) else None
        if not isinstance(meta, dict):
            return pb.NodePrepareResourceResponse(
                error=f"claim {ref.namespace}/{ref.name} as read from the API server has no metadata mapping")
        uid = str(meta.get("uid") or "")
        if ref.uid and uid != ref.uid:
            return pb.NodePrepareResourceResponse(
                error=f"claim {ref.namespace}/{ref.name} has uid {uid}, kubelet asked for {ref.uid}")
        try:
            pod, results = claim_devices(claim, self.node, self.inventory())
            inv = self.inventory()
            edits = {c.name: container_devices(pod, c.name, inv, c.devices[0].type) for c in pod.allocation.containers
                     if c.devices}
        except (AllocateError, InvalidInput) as e:
            return pb.NodePrepareResourceResponse(error=str(e))
        ids = self.cdi.write(ref.uid or uid, edits)
        devices = [pb.Device(request_names=[r.request.split("/")[0]], pool_name=r.pool, device_name=r.device,
                             cdi_device_ids=[ids[r.request]], **({"share_id": r.share_id} if r.share_id else {}))
                   for r in results]
        return pb.NodePrepareResourceResponse(devices=devices)

    def NodePrepareResources(self, request: pb.NodePrepareResourcesRequest,
                             context: grpc.ServicerContext) -> pb.NodePrepareResourcesResponse:
        out = pb.NodePrepareResourcesResponse()
        with self._lock:
            for ref in request.claims:
                out.claims[ref.uid].CopyFrom(self._prepare(ref))
        return out

    def NodeUnprepareResources(self, request: pb.NodeUnprepareResourcesRequest,
                               context: grpc.ServicerContext) -> pb.NodeUnprepareResourcesResponse:
        out = pb.NodeUnprepareResourcesResponse()
        with self._lock:
            for ref in request.claims:
                try:
                    self.cdi.remove(ref.uid)
                    out.claims[ref.uid].CopyFrom(pb.NodeUnprepareResourceResponse())
                except OSError as e:
                    out.claims[ref.uid].CopyFrom(pb.NodeUnprepareResourceResponse(error=str(e)))
        return out


class RegistrationService(reg_grpc.RegistrationServicer):
    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint
        self.registered = threading.Event()
        self.error = ""

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:
        return reg.PluginInfo(type="DRAPlugin", name=dra.DRIVER, endpoint=str(self.endpoint),
                              supported_versions=SERVICES)

    def NotifyRegistrationStatus(self, request: reg.RegistrationStatus,
                                 context: grpc.ServicerContext) -> reg.RegistrationStatusResponse:
        if request.plugin_registered:
            self.registered.set()
            self.error = ""
            log.info("kubelet registered DRA driver %s", dra.DRIVER)
        else:
            self.error = request.error
            log.warning("kubelet refused DRA driver %s: %s", dra.DRIVER, request.error)
        return reg.RegistrationStatusResponse()


class KubeletPlugin:
    """The two gRPC servers: the DRA service on ``plugin_dir/dra.sock``, registration on
    ``registry_dir/<driver>-reg.sock`` (kubelet's plugin watcher finds it there)."""

    def __init__(self, node: str, read_claim: ClaimReader, inventory: Callable[[], Inventory], *,
                 cdi: CdiSpecs, plugin_dir: Path = PLUGIN_DIR, registry_dir: Path = REGISTRY_DIR) -> None:
        self.plugin_socket = plugin_dir / "dra.sock"
        self.registry_socket = registry_dir / f"{dra.DRIVER}-reg.sock"
        self.service = DraPluginService(node, read_claim, inventory, cdi)
        self.registration = RegistrationService(self.plugin_socket)
        self._servers: list[grpc.Server] = []

    def start(self) -> None:
        for sock, add in ((self.plugin_socket, lambda s: pb_grpc.add_DRAPluginServicer_to_server(self.service, s)),
                          (self.registry_socket,
                           lambda s: reg_grpc.add_RegistrationServicer_to_server(self.registration, s))):
            sock.parent.mkdir(parents=True, exist_ok=True)
            if sock.exists():
                os.unlink(sock)
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            add(server)
            server.add_insecure_port(f"unix://{sock}")
            server.start()
            self._servers.append(server)
        log.info("DRA kubelet plugin serving on %s (registration %s)", self.plugin_socket, self.registry_socket)

    def stop(self) -> None:
        for s in self._servers:
            s.stop(grace=1).wait()
        self._servers.clear()
        for sock in (self.plugin_socket, self.registry_socket):
            if sock.exists():
                os.unlink(sock)
