"""An aiohttp app served on 127.0.0.1 from a background thread, so hypothesis can drive it over real
HTTP from ordinary (sync) tests."""

from __future__ import annotations

import asyncio
import ssl
import threading

from aiohttp import web


class ServerThread:
    """Serve an aiohttp app on 127.0.0.1 (a free port; over TLS with ``ssl_context``) from a thread."""

    def __init__(self, app: web.Application, ssl_context: ssl.SSLContext | None = None) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        self.runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=ssl_context)
        self.loop.run_until_complete(site.start())
        self.port: int = self.runner.addresses[0][1]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()
