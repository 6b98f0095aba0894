"""The device plugin servers: one gRPC server per resource on its own unix socket, registered
with kubelet, re-registered when kubelet restarts (kubelet then wipes the plugin directory and
recreates its own socket)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from pathlib import Path

import grpc  # type: ignore[import-untyped]

from devshare.agent.deviceplugin import deviceplugin_v1beta1_pb2 as pb
from devshare.agent.deviceplugin import deviceplugin_v1beta1_pb2_grpc as pb_grpc
from devshare.agent.deviceplugin.allocator import Allocator
from devshare.agent.inventory import Inventory
from devshare.agent.matching import AllocateError
from devshare.agent.resources import MAX_LIST_BYTES, PluginResource, fake_count, fake_devices

log = logging.getLogger("devshare.agent.deviceplugin")

API_VERSION = "v1beta1"
DEFAULT_DIR = Path("/var/lib/kubelet/device-plugins")
KUBELET_SOCKET = "kubelet.sock"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
NO_DEVICE = "no such device on this node"
MIN_ID_BYTES = 14  # the least one listed device takes on the wire (a short id, "Healthy", framing)


def list_response(resource: PluginResource, inv: Inventory) -> pb.ListAndWatchResponse:
    devices = []
    for d in fake_devices(resource, inv):
        dev = pb.Device(ID=d.id, health=HEALTHY if d.healthy else UNHEALTHY)
        if d.numa_node >= 0:
            dev.topology.nodes.append(pb.NUMANode(ID=d.numa_node))
        devices.append(dev)
    return pb.ListAndWatchResponse(devices=devices)


def servable(resource: PluginResource, inv: Inventory) -> str | None:
    """Why ``resource`` cannot be served as a device plugin on this inventory, or None when it can."""
    count = fake_count(resource, inv)
    if count * MIN_ID_BYTES > MAX_LIST_BYTES:  # clearly too many, without building them
        return (f"its {count} ids take more than {MAX_LIST_BYTES} bytes, more than kubelet accepts in one "
                "ListAndWatch message")
    response = list_response(resource, inv)
    if not response.devices:
        return NO_DEVICE
    size = response.ByteSize()
    if size > MAX_LIST_BYTES:
        return (f"its {len(response.devices)} ids take {size} bytes, more than kubelet accepts in one "
                "ListAndWatch message")
    return None


class DevicePluginService(pb_grpc.DevicePluginServicer):
    """The DevicePlugin gRPC service of one resource."""

    def __init__(self, resource: PluginResource, allocator: Allocator, inventory: Callable[[], Inventory],
                 changed: threading.Condition, version: Callable[[], int], stopping: threading.Event) -> None:
        self.resource = resource
        self.allocator = allocator
        self.inventory = inventory
        self.changed = changed
        self.version = version
        self.stopping = stopping
        self.streams = 0  # ListAndWatch streams open now (kubelet follows this server)
        self._count = threading.Lock()

    def GetDevicePluginOptions(self, request: pb.Empty, context: grpc.ServicerContext) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request: pb.Empty, context: grpc.ServicerContext) -> Iterator[pb.ListAndWatchResponse]:
        seen = -1
        last: pb.ListAndWatchResponse | None = None
        with self._count:
            self.streams += 1
        try:
            while context.is_active() and not self.stopping.is_set():
                with self.changed:
                    if self.version() == seen:
                        self.changed.wait(timeout=1.0)
                        continue
                    seen = self.version()
                response = list_response(self.resource, self.inventory())
                if response != last:
                    last = response
                    yield response
        finally:
            with self._count:
                self.streams -= 1

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        asks = [(list(c.available_deviceIDs), list(c.must_include_deviceIDs), int(c.allocation_size))
                for c in request.container_requests]
        try:
            picks = self.allocator.preferred(self.resource, asks)
        except Exception as e:  # a preference is only advice: kubelet picks itself, the Allocate decides
            log.warning("GetPreferredAllocation %s: %s; leaving the pick to kubelet", self.resource.name, e)
            picks = [(must + [i for i in available if i not in must])[:size] for available, must, size in asks]
        out = pb.PreferredAllocationResponse()
        for ids in picks:
            out.container_responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return out

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        try:
            answers = self.allocator.allocate(self.resource, [list(c.devices_ids) for c in request.container_requests])
        except AllocateError as e:
            log.warning("Allocate %s refused: %s", self.resource.name, e)
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"devshare: {e}")
        response = pb.AllocateResponse()
        for a in answers:
            r = pb.ContainerAllocateResponse(envs=a.envs)
            for f in a.device_files:
                r.devices.append(pb.DeviceSpec(container_path=f, host_path=f, permissions="rw"))
            response.container_responses.append(r)
        return response

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


class DevicePlugins:
    """Every plugin of the node: serve, register, watch for kubelet restarts, push health changes."""

    def __init__(
        self,
        resources: Sequence[PluginResource],
        allocator: Allocator,
        inventory: Callable[[], Inventory],
        *,
        plugin_dir: Path = DEFAULT_DIR,
        kubelet_socket: Path | None = None,
        watch_interval: float = 1.0,
        on_kubelet_restart: Callable[[], None] | None = None,
    ) -> None:
        self.resources = list(resources)
        self.on_kubelet_restart = on_kubelet_restart  # before registering again: no Allocate can come yet
        self.allocator = allocator
        self.inventory = inventory
        self.plugin_dir = plugin_dir
        self.kubelet_socket = kubelet_socket or plugin_dir / KUBELET_SOCKET
        self.watch_interval = watch_interval
        self.changed = threading.Condition()
        self._version = 0
        self._stopping = threading.Event()
        self._stop_serving = threading.Event()
        self._kubelet_id: tuple[int, int] | None = None
        self._watcher: threading.Thread | None = None
        self._servers: list[grpc.Server] = []
        self._services: dict[str, DevicePluginService] = {}  # resource -> the service served now
        self.registrations = 0
        self._pending = False  # the last registration failed: try again
        self._held: set[str] = set()  # resources this kubelet (since its socket last changed) holds

    def notify(self) -> None:
        """The inventory changed (health): every ListAndWatch stream sends the new list."""
        with self.changed:
            self._version += 1
            self.changed.notify_all()

    def _socket(self, r: PluginResource) -> Path:
        return self.plugin_dir / r.socket_name()

    def _serve(self) -> None:
        """One gRPC server per resource, each on its own socket (kubelet dials the endpoint it registered)."""
        self._stop_serving = threading.Event()
        servers = []
        self._services = {}
        for r in self.resources:
            path = self._socket(r)
            if path.exists():
                path.unlink()
            s = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
            service = DevicePluginService(r, self.allocator, self.inventory, self.changed, lambda: self._version,
                                          self._stop_serving)
            self._services[r.name] = service
            pb_grpc.add_DevicePluginServicer_to_server(service, s)  # type: ignore[no-untyped-call]
            s.add_insecure_port(f"unix://{path}")
            s.start()
            servers.append(s)
        self._servers = servers

    def _register(self) -> None:
        """Register every resource this kubelet does not hold yet. A resource registered in an earlier
        try that failed on a later one is not registered again: kubelet's device manager refuses a second
        registration of an endpoint it is connected to ("device plugin already connected"). That answer
        means held when kubelet follows this server (its ListAndWatch stream is open: the answer to an
        earlier Register was lost, a timeout on a loaded node); otherwise kubelet still follows a server
        of ours that is gone (an agent restart it has not noticed yet), and the registration is tried
        again at the next round."""
        with grpc.insecure_channel(f"unix://{self.kubelet_socket}") as channel:
            stub = pb_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            for r in self.resources:
                if r.name in self._held:
                    continue
                try:
                    stub.Register(
                        pb.RegisterRequest(version=API_VERSION, endpoint=r.socket_name(), resource_name=r.name,
                                           options=pb.DevicePluginOptions()),
                        timeout=10,
                    )
                except grpc.RpcError as e:
                    service = self._services.get(r.name)
                    if "already connected" not in str(e.details() if hasattr(e, "details") else e) \
                            or service is None or service.streams == 0:
                        raise
                    log.info("kubelet holds %s already (%s)", r.name, r.socket_name())
                else:
                    log.info("registered %s with kubelet (%s)", r.name, r.socket_name())
                self._held.add(r.name)
        self.registrations += 1

    def _kubelet_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.kubelet_socket)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    def _stop_servers(self) -> None:
        self._stop_serving.set()
        for s in self._servers:
            s.stop(grace=0.5)
        self._servers = []

    def start(self) -> None:
        """Serve every resource and register it; then watch kubelet's socket in the background."""
        self._serve()
        self._kubelet_id = self._kubelet_identity()
        # a first registration that fails (kubelet still follows a server of ours that is gone) is tried
        # again by the watch
        self._pending = self._kubelet_id is not None and not self._register_logged()
        self._watcher = threading.Thread(target=self._watch, name="devshare-kubelet-watch", daemon=True)
        self._watcher.start()

    def _register_logged(self) -> bool:
        try:
            self._register()
            return True
        except grpc.RpcError as e:
            log.error("registration with kubelet failed (will retry): %s", e)
            return False

    def _watch(self) -> None:
        pending = self._pending
        while not self._stopping.wait(self.watch_interval):
            ident = self._kubelet_identity()
            ours_gone = any(not self._socket(r).exists() for r in self.resources)
            if ident is None:
                continue
            if ident != self._kubelet_id or ours_gone or pending:
                log.info("kubelet restarted (its socket was recreated): serving and registering again")
                if ident != self._kubelet_id and self.on_kubelet_restart is not None:
                    try:
                        self.on_kubelet_restart()
                    except Exception:
                        log.exception("settling what the previous kubelet left failed; registering anyway")
                if ident != self._kubelet_id:
                    self._held.clear()  # a new kubelet holds nothing of ours
                self._kubelet_id = ident
                if ours_gone or not pending:
                    self._stop_servers()
                    self._serve()
                    self._held.clear()  # our sockets made anew: every resource again
                pending = not self._register_logged()

    def stop(self) -> None:
        self._stopping.set()
        self.notify()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        self._stop_servers()
        for r in self.resources:
            self._socket(r).unlink(missing_ok=True)
