"""Running the webhook over HTTPS until SIGINT/SIGTERM."""

from __future__ import annotations

import logging
from pathlib import Path

from aiohttp import web

from devshare.server.eventloop import new_event_loop
from devshare.server.tls import CertReloader, TLSCollector
from devshare.server.webhook.app import WebhookConfig, make_app

log = logging.getLogger(__name__)


def serve(
    config: WebhookConfig,
    *,
    tls_cert: Path,
    tls_key: Path,
    host: str = "0.0.0.0",
    port: int = 9443,
    reload_interval: float = 5.0,
    event_loop: str = "auto",
) -> None:
    """Serve until stopped. The certificate pair is re-read when the files change (e.g. a renewed
    Secret mounted by the kubelet), checked at most every ``reload_interval`` seconds."""
    tls = CertReloader(tls_cert, tls_key, interval=reload_interval)
    config.metrics.registry.register(TLSCollector(tls))
    app = make_app(config)
    log.info("devshare webhook on https://%s:%d (scheduler %s)", host, port, config.scheduler_name)
    web.run_app(app, host=host, port=port, ssl_context=tls.context, access_log=None, print=None,
                loop=new_event_loop(event_loop))
