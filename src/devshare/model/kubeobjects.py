"""Facts of Kubernetes objects devshare relies on: what Kubernetes accepts as an object's name and a
namespace (``k8s.io/apimachinery``'s ``validation.IsDNS1123Subdomain`` and ``IsDNS1123Label``), the
phases in which a pod is finished, and how an object is keyed.

A name read from a request body (a /bind's ``PodName``, a filter's Pod) or from anywhere else goes
into the path of an API request only once it passed these: a name holding ``/``, a space, a CR or
a LF could otherwise name another object, or split the request (issue 37)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from devshare.model.errors import InvalidInput

TERMINAL_PHASES = ("Succeeded", "Failed")  # a pod in these holds nothing any more
LABEL_MAX = 63
SUBDOMAIN_MAX = 253
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def label_problem(value: object) -> str | None:
    """Why ``value`` is not a DNS-1123 label (a namespace's name), or None."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > LABEL_MAX:
        return f"must be at most {LABEL_MAX} characters, has {len(value)}"
    if not value.isascii() or not _LABEL.fullmatch(value):
        return ("must be lowercase letters, digits and '-', starting and ending with a letter or digit "
                "(a DNS-1123 label)")
    return None


def subdomain_problem(value: object) -> str | None:
    """Why ``value`` is not a DNS-1123 subdomain (the name of a Pod, a Node, a ConfigMap...), or None."""
    if not isinstance(value, str) or not value:
        return "must be a non-empty string"
    if len(value) > SUBDOMAIN_MAX:
        return f"must be at most {SUBDOMAIN_MAX} characters, has {len(value)}"
    if not value.isascii() or not _SUBDOMAIN.fullmatch(value):
        return ("must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit "
                "(a DNS-1123 subdomain)")
    return None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}...({len(text)} characters)"


def check_namespace(value: object, *, what: str = "namespace") -> str:
    """``value`` when it is a valid namespace; :class:`InvalidInput` naming ``what`` otherwise."""
    problem = label_problem(value)
    if problem is not None:
        raise InvalidInput(f"{_shown(value)} is not a valid Kubernetes namespace: {problem}", field=what)
    assert isinstance(value, str)
    return value


def check_name(value: object, *, what: str = "name") -> str:
    """``value`` when it is a valid object name; :class:`InvalidInput` naming ``what`` otherwise."""
    problem = subdomain_problem(value)
    if problem is not None:
        raise InvalidInput(f"{_shown(value)} is not a valid Kubernetes object name: {problem}", field=what)
    assert isinstance(value, str)
    return value


def meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An object's metadata (empty when it has none, or none that is a mapping)."""
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` for namespaced objects, ``name`` otherwise."""
    m = meta(obj)
    ns = m.get("namespace")
    return f"{ns}/{m.get('name', '')}" if ns else str(m.get("name", ""))
