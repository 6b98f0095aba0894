"""A client that plays kubelet over the real device-plugin gRPC sockets.

It serves kubelet's Registration service on ``kubelet.sock``, follows each registered plugin's
ListAndWatch, and admits pods as kubelet does: one pod at a time, container by container (init
containers first), each device-plugin resource of a container in turn (in map order: any order),
picking free device ids from the plugin's list (asking ``GetPreferredAllocation`` first when the
plugin offers it, keeping only offered ids), calling ``Allocate`` on the plugin's socket, and
writing its checkpoint (``kubelet_internal_checkpoint``, the NUMA-keyed format) after each
container, before the next one, and after every ListAndWatch update (as kubelet v1.37's device
manager does: on a fresh node the file appears with the first device list, before any Allocate;
tests/e2e/test_kubelet_*.py run the real code). What every container got is kept in
:attr:`Kubelet.got`.
"""

from __future__ import annotations

import base64
import json
import queue
import random
import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from devshare.agent.deviceplugin import deviceplugin_v1beta1_pb2 as pb
from devshare.agent.deviceplugin import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from devshare.agent.resources import resource_named

CHECKPOINT = "kubelet_internal_checkpoint"


class Refused(Exception):
    """A plugin refused an Allocate: kubelet fails the pod's admission (UnexpectedAdmissionError)."""


class Kubelet(pb_grpc.RegistrationServicer):
    def __init__(self, directory: Path, *, rng: random.Random | None = None) -> None:
        self.directory = directory
        self.rng = rng or random.Random(0)
        self.registered: queue.Queue[str] = queue.Queue()
        self.devices: dict[str, list[str]] = {}  # resource -> the ids its plugin lists now
        # resource -> every list its plugin sent, in order, as (id, health) pairs
        self.lists: dict[str, queue.Queue[list[tuple[str, str]]]] = {}
        self.endpoints: dict[str, str] = {}  # resource -> socket file name
        self.entries: list[dict[str, Any]] = []  # the checkpoint's PodDeviceEntries
        self.got: dict[tuple[str, str], dict[str, str]] = {}  # (pod uid, container) -> envs handed to it
        self.picked: dict[tuple[str, str, str], list[str]] = {}  # (pod uid, container, resource) -> ids
        self.calls = 0
        # resources whose first Register kubelet takes but whose answer is lost (an error instead: the
        # plugin's call timed out on a loaded node)
        self.lose_answer: set[str] = set()
        self.connected: set[tuple[str, str]] = set()  # (resource, endpoint) followed now
        self._channels: list[grpc.Channel] = []
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{directory / 'kubelet.sock'}")
        self.server.start()

    # ------------------------------------------------------------------ Registration
    def Register(self, request: pb.RegisterRequest, context: Any) -> pb.Empty:
        assert request.version == "v1beta1"
        key = (request.resource_name, request.endpoint)
        if key in self.connected:  # kubelet's device manager (manager.go PluginConnected) refuses it
            context.abort(grpc.StatusCode.UNKNOWN,
                          f"device plugin already connected: {self.directory / request.endpoint}")
        self.endpoints[request.resource_name] = request.endpoint
        channel = grpc.insecure_channel(f"unix://{self.directory / request.endpoint}")
        self._channels.append(channel)
        stub = pb_grpc.DevicePluginStub(channel)
        first = threading.Event()
        lists = self.lists.setdefault(request.resource_name, queue.Queue())

        def follow() -> None:
            try:
                # kubelet dials a plugin blocking until it connects (grpc.WithBlock); without
                # wait_for_ready a channel still backing off from the previous plugin server fails at once
                for response in stub.ListAndWatch(pb.Empty(), wait_for_ready=True, timeout=600):
                    lists.put([(d.ID, d.health) for d in response.devices])
                    with self._lock:
                        self.devices[request.resource_name] = [d.ID for d in response.devices
                                                               if d.health == "Healthy"]
                    self.write_checkpoint()  # kubelet's genericDeviceUpdateCallback
                    first.set()
            except grpc.RpcError:
                pass
            finally:
                self.connected.discard(key)  # the plugin's stream ended: kubelet forgets the endpoint

        self.connected.add(key)
        threading.Thread(target=follow, daemon=True).start()
        first.wait(120)  # generous: the machine may be loaded; the wait ends with the first list
        self.registered.put(request.resource_name)
        if request.resource_name in self.lose_answer:
            self.lose_answer.discard(request.resource_name)
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        return pb.Empty()

    def wait_registered(self, n: int, timeout: float = 120) -> set[str]:
        return {self.registered.get(timeout=timeout) for _ in range(n)}

    # ------------------------------------------------------------------ admission
    def _free(self, resource: str, n: int) -> list[str]:
        used = {i for e in self.entries if e["ResourceName"] == resource for ids in e["DeviceIDs"].values()
                for i in ids}
        with self._lock:
            free = [i for i in self.devices.get(resource, []) if i not in used]
        if len(free) < n:
            raise Refused(f"kubelet: {n} {resource} asked, {len(free)} free")
        self.rng.shuffle(free)  # Go set order
        res = resource_named(resource)
        assert res is not None
        with grpc.insecure_channel(f"unix://{self.directory / res.socket_name()}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            options = stub.GetDevicePluginOptions(pb.Empty(), timeout=120, wait_for_ready=True)
            if options.get_preferred_allocation_available:
                out = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
                    pb.ContainerPreferredAllocationRequest(available_deviceIDs=free, allocation_size=n)]), timeout=120)
                preferred = [i for i in out.container_responses[0].deviceIDs if i in set(free)]
                free = list(dict.fromkeys(preferred + free))  # kubelet: preferred ∩ available, then the rest
        return free[:n]

    def allocate(self, resource: str, ids: list[str]) -> pb.ContainerAllocateResponse:
        res = resource_named(resource)
        assert res is not None
        with grpc.insecure_channel(f"unix://{self.directory / res.socket_name()}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            try:
                out = stub.Allocate(pb.AllocateRequest(container_requests=[
                    pb.ContainerAllocateRequest(devices_ids=ids)]), timeout=120, wait_for_ready=True)
            except grpc.RpcError as e:
                raise Refused(e.details() or str(e)) from None
        self.calls += 1
        return out.container_responses[0]

    def admit(self, pod: dict[str, Any], served: set[str], between: Any = None) -> None:
        """Admit ``pod`` (a Pod object): Allocate for each container and resource of ``served``.
        ``between()`` is called before every Allocate (a test's hook: restart the agent there)."""
        uid = pod["metadata"]["uid"]
        spec = pod["spec"]
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            limits = (c.get("resources") or {}).get("limits") or {}
            names = [r for r in limits if r in served]
            self.rng.shuffle(names)  # Go map order
            envs: dict[str, str] = {}
            for resource in names:
                ids = self._free(resource, int(limits[resource]))
                if between is not None:
                    between()
                response = self.allocate(resource, ids)
                envs.update(response.envs)
                self.picked[(uid, c["name"], resource)] = ids
                self.entries.append({"PodUID": uid, "ContainerName": c["name"], "ResourceName": resource,
                                     "DeviceIDs": {"0": ids},
                                     "AllocResp": base64.b64encode(response.SerializeToString()).decode()})
            if names:
                self.got[(uid, c["name"])] = envs
                self.write_checkpoint()  # after the container, before the next one (kubelet's devicemanager)

    def write_checkpoint(self) -> None:
        with self._lock:
            data = {"Data": {"PodDeviceEntries": list(self.entries), "RegisteredDevices": dict(self.devices)},
                    "Checksum": 0}
            tmp = self.directory / f".{CHECKPOINT}.{threading.get_ident()}.tmp"
            tmp.write_text(json.dumps(data))
            tmp.replace(self.directory / CHECKPOINT)

    def stop(self) -> None:
        self.server.stop(None)
        for c in self._channels:
            c.close()
