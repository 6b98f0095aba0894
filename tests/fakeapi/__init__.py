"""A fake Kubernetes API server for tests (see :mod:`fakeapi.server`) and its pytest fixtures
(:mod:`fakeapi.plugin`: import the fixtures into a conftest)."""

from fakeapi.server import FakeApiServer

__all__ = ["FakeApiServer"]
