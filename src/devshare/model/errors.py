"""Errors raised for bad input: each says what is wrong and how to fix it."""

from __future__ import annotations


class InvalidInput(ValueError):
    """Input that cannot be accepted. ``str(err)`` is a complete message for a person."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class InvalidQuantity(InvalidInput):
    """A Kubernetes quantity that does not parse."""


class InvalidRequest(InvalidInput):
    """A pod's device request that makes no sense (bad combination, bad value)."""


class InvalidDevice(InvalidInput):
    """A Device object (or fake device description) that is malformed."""


class InvalidAnnotation(InvalidInput):
    """An allocation annotation that cannot be decoded."""
