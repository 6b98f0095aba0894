"""A failure inside the webhook is never a 500: /validate refuses saying so (fail closed), /mutate
leaves the pod unchanged; both are counted as errors. Readiness follows the app's life."""

from __future__ import annotations

from typing import Any, NoReturn

import pytest
from aiohttp.test_utils import make_mocked_request

from devshare.server.webhook import app as app_module
from devshare.server.webhook.app import READY, WebhookConfig, make_app
from support.webhook_client import Client
from support.webhook_pods import pod


def boom(*args: Any, **kwargs: Any) -> NoReturn:
    raise RuntimeError("a bug")


def test_validate_fails_closed(client: Client, webhook_config: WebhookConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_module, "judge", boom)
    before = webhook_config.metrics.count("validate", "error")
    response = client.review("/validate", pod({"koordinator.sh/gpu": "50"}))  # HTTP 200, uid echoed
    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    assert "internal error: RuntimeError" in response["status"]["message"]
    assert webhook_config.metrics.count("validate", "error") == before + 1
    # pods without devices never reach the failing code
    assert client.review("/validate", pod({"cpu": "1"}))["allowed"] is True


def test_mutate_leaves_the_pod_unchanged(client: Client, webhook_config: WebhookConfig,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_module, "mutation", boom)
    before = webhook_config.metrics.count("mutate", "error")
    response = client.review("/mutate", pod({"koordinator.sh/gpu": "50"}))
    assert response["allowed"] is True and "patch" not in response
    assert "unchanged" in response["warnings"][0]
    assert webhook_config.metrics.count("mutate", "error") == before + 1


async def test_readiness_follows_startup_and_shutdown() -> None:
    app = make_app()
    app.freeze()
    handler = app_module._readyz
    assert (await handler(make_mocked_request("GET", "/readyz", app=app))).status == 503
    await app.startup()
    assert app[READY][0] is True
    assert (await handler(make_mocked_request("GET", "/readyz", app=app))).status == 200
    await app.shutdown()
    assert (await handler(make_mocked_request("GET", "/readyz", app=app))).status == 503
    await app.cleanup()
