"""``devshare webhook --kubeconfig``: the device types some node has, followed live from the API."""

from __future__ import annotations

from devshare.kube.rest import KubeClient
from devshare.model.device import DeviceInfo, NodeDevices, device_object
from devshare.server.webhook.cluster import WatchedDeviceTypes
from fakeapi.plugin import fake_api, fake_kubeconfig  # noqa: F401
from fakeapi.server import FakeApiServer
from support.waiting import eventually


def device(node: str, *types: str) -> dict:
    return device_object(NodeDevices(node=node, devices=tuple(
        DeviceInfo(type=t, minor=i, id=f"{t}-{node}-{i}") for i, t in enumerate(types))))


async def test_types_follow_the_device_objects(fake_api: FakeApiServer, fake_kubeconfig) -> None:  # noqa: F811
    source = WatchedDeviceTypes(KubeClient.connect(fake_kubeconfig, watch_timeout=30))
    assert source.known_types() is None  # not synced yet: the check is skipped
    await source.start()
    try:
        await eventually(lambda: source.informer.is_synced)
        assert source.known_types() is None  # no Device object at all: skip, don't refuse everything
        fake_api.put(device("n1", "gpu", "gpu"))
        await eventually(lambda: source.known_types() == frozenset({"gpu"}))
        fake_api.put(device("n2", "gpu", "rdma"))
        await eventually(lambda: source.known_types() == frozenset({"gpu", "rdma"}))
        fake_api.delete("devices", "n2")
        await eventually(lambda: source.known_types() == frozenset({"gpu"}))
    finally:
        await source.stop()
