"""The credentials of a kubeconfig user, as the ``Authorization`` header of :mod:`devshare.kube.rest`'s
requests.

Loading them is lightkube's (its kubeconfig models and ``httpx.Auth`` objects: a token, a token file
such as the in-cluster ServiceAccount's, an exec plugin, basic auth); the one client of the API
server sends the header they produce, and asks again once after a 401 (a token file is re-read, an
exec plugin run again: tokens rotate).
"""

from __future__ import annotations

import asyncio

import httpx2 as httpx

from devshare.kube.errors import BackendError


class Credentials:
    """The ``Authorization`` header of a kubeconfig user, through lightkube's ``httpx.Auth`` for it
    (None: the user authenticates with a client certificate, or not at all). The header is asked once
    and kept; :meth:`refresh` asks again after a 401."""

    def __init__(self, auth: httpx.Auth | None) -> None:
        self.auth = auth
        self._header: str | None = None
        self._asked = False
        self._lock = asyncio.Lock()

    async def header(self) -> str | None:
        if not self._asked:
            async with self._lock:
                if not self._asked:
                    self._header = await self._ask(refresh=False)
                    self._asked = True
        return self._header

    async def refresh(self, rejected: str | None) -> bool:
        """Ask again after the API server refused ``rejected``; True when the header changed (retry)."""
        async with self._lock:
            if self._header != rejected:
                return True  # another request refreshed it meanwhile
            self._header = await self._ask(refresh=True)
            self._asked = True
            return self._header != rejected

    async def _ask(self, *, refresh: bool) -> str | None:
        if self.auth is None:
            return None
        request = httpx.Request("GET", "https://kubernetes.invalid/")
        flow = self.auth.async_auth_flow(request)
        try:
            sent = await flow.__anext__()
            header = sent.headers.get("Authorization")
            if refresh:
                try:
                    sent = await flow.asend(httpx.Response(401, request=sent))
                    header = sent.headers.get("Authorization")
                except StopAsyncIteration:
                    pass  # a fixed credential: nothing to ask again
        except Exception as e:  # lightkube's ConfigError (a token file gone, an exec plugin failing), ...
            raise BackendError(f"cannot get the credentials of the kubeconfig user: {e}") from e
        finally:
            await flow.aclose()
        return header
