"""RFC 6902 JSON patch operations with RFC 6901 pointers (``~`` as ``~0``, ``/`` as ``~1``)."""

from __future__ import annotations

from typing import Any


def escape(token: str | int) -> str:
    """One pointer token: ``kubernetes.io/gpu`` -> ``kubernetes.io~1gpu``."""
    return str(token).replace("~", "~0").replace("/", "~1")


def pointer(*tokens: str | int) -> str:
    """``pointer("spec", "containers", 0)`` -> ``/spec/containers/0``."""
    return "".join("/" + escape(t) for t in tokens)


def add(path: str, value: Any) -> dict[str, Any]:
    """Add a member (or replace it when present: RFC 6902 section 4.1)."""
    return {"op": "add", "path": path, "value": value}


def remove(path: str) -> dict[str, Any]:
    return {"op": "remove", "path": path}
