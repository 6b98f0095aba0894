"""Errors a backend raises, whatever talks to the API server underneath."""

from __future__ import annotations


class BackendError(Exception):
    """A request to the API server (or the in-memory stand-in) failed. ``code``: HTTP status, if any."""

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class Unavailable(BackendError):
    """The server could not be reached or dropped the connection: retry later (with backoff)."""


class Gone(BackendError):
    """410: the resourceVersion a watch asked for is older than the server's history: re-list."""


class NotFound(BackendError):
    """404: the object does not exist."""


class Conflict(BackendError):
    """409: the object changed since it was read (stale resourceVersion), already exists, or the pod
    is already bound."""
