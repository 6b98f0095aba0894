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


def yaml_error(e: Exception, path: object) -> InvalidInput:
    """A PyYAML error as one line naming the file, line and column (PyYAML's own message spans 4 to 8
    lines and names ``<unicode string>`` when it parsed a string)."""
    problem = getattr(e, "problem", None) or (str(e).splitlines() or ["syntax error"])[0]
    context = getattr(e, "context", None)
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = str(path)
    if mark is not None:
        where += f", line {mark.line + 1}, column {mark.column + 1}"
    return InvalidInput(f"not valid YAML: {problem}" + (f" ({context})" if context else ""), field=where)
