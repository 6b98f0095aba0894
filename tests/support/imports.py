"""Making a package look uninstalled for one test."""

from __future__ import annotations

import builtins
from typing import Any

import pytest


def without_package(monkeypatch: pytest.MonkeyPatch, package: str) -> None:
    """Every ``import package`` raises ImportError for the rest of the test, as where it is not
    installed (modules imported before keep working)."""
    real_import = builtins.__import__

    def refuse(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == package:
            raise ImportError(f"No module named {package!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)
