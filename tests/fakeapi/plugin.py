"""pytest fixtures around the fake API server. In a conftest::

    from fakeapi.plugin import fake_api, fake_kubeconfig, live_backend  # noqa: F401
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from devshare.kube.rest import KubeClient
from fakeapi.server import FakeApiServer


@pytest.fixture
async def fake_api() -> AsyncIterator[FakeApiServer]:
    """A started fake API server on 127.0.0.1 (random port), stopped after the test."""
    server = await FakeApiServer().start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def fake_kubeconfig(fake_api: FakeApiServer, tmp_path: Path) -> Path:
    """A kubeconfig file (plain http, a token, namespace devshare-system) pointing at ``fake_api``."""
    return fake_api.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
async def live_backend(fake_kubeconfig: Path) -> AsyncIterator[KubeClient]:
    """The API client connected to ``fake_api`` through the kubeconfig, with short server-side watches."""
    backend = KubeClient.connect(fake_kubeconfig, watch_timeout=30)
    try:
        yield backend
    finally:
        await backend.close()
