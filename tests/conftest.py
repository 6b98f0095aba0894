"""Fixtures shared by every test folder (builders live in ``tests/support/``).

- the fake API server (``fake_api``, ``fake_kubeconfig``, ``live_backend``: :mod:`fakeapi.plugin`),
- a small openb trace (``small_trace``: :mod:`support.trace`),
- the webhook: a certificate made once per session with ``make_serving_cert`` (the openssl binary), the
way an operator would with ``devshare webhook cert``, and the webhook served over HTTPS with it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devshare.model import dialects
from devshare.server.tls import CertReloader, ServingCert, make_serving_cert
from devshare.server.webhook.app import WebhookConfig, make_app
from devshare.server.webhook.cluster import StaticDeviceTypes
from fakeapi.plugin import fake_api, fake_kubeconfig, live_backend  # noqa: F401
from support.server import ServerThread
from support.trace import small_trace  # noqa: F401
from support.webhook_client import Client


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> ServingCert:
    return make_serving_cert(
        "devshare-webhook", "devshare-system", tmp_path_factory.mktemp("certs"),
        extra_names=("localhost", "127.0.0.1"),
    )


@pytest.fixture(scope="session")
def server(certs: ServingCert) -> Iterator[ServerThread]:
    """The webhook with defaults and a cluster that has GPUs and RDMA NICs (no FPGA)."""
    tls = CertReloader(certs.cert, certs.key)
    config = WebhookConfig(cluster=StaticDeviceTypes(frozenset({"gpu", "rdma"})))
    srv = ServerThread(make_app(config), tls.context)
    yield srv
    srv.close()


@pytest.fixture(scope="session")
def client(server: ServerThread, certs: ServingCert) -> Iterator[Client]:
    c = Client(server.port, certs.ca_cert)
    yield c
    c.close()


@pytest.fixture(scope="session")
def webhook_config(server: ServerThread) -> WebhookConfig:
    from devshare.server.webhook.app import CONFIG

    return server.app[CONFIG]


@pytest.fixture(autouse=True)
def _no_configured_types_leak() -> Iterator[None]:
    """A configuration file read in-process (``devshare schedule --config`` through CliRunner,
    ``build_app``) registers its device types' resource names and its schedule mode in the dialect
    registry; each test starts and ends without them."""
    yield
    if any(n.startswith("type:") for n in dialects.DIALECTS):
        dialects.configure_types({})
    if any(d.schedule_mode != "index" for d in dialects.DIALECTS.values()):
        dialects.configure_schedule_mode("index")
