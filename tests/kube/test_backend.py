"""The backend interface (kube/backend.py): the kinds every backend lists and watches, and an object's
resourceVersion. Its two implementations: tests/kube/test_rest.py and tests/kube/test_memory.py."""

from __future__ import annotations

from typing import get_args

from devshare.kube.backend import KINDS, OPTIONAL_KINDS, Kind, resource_version


def test_every_kind_is_followed_once_and_pods_last() -> None:
    """A kind added to ``Kind`` but not to KINDS would never be listed; the informer lists them in this
    order, so pods come after the nodes and devices they are placed on."""
    assert sorted(KINDS) == sorted(get_args(Kind)) and len(set(KINDS)) == len(KINDS)
    assert KINDS[-1] == "pods"
    assert set(KINDS) > OPTIONAL_KINDS and "pods" not in OPTIONAL_KINDS and "nodes" not in OPTIONAL_KINDS


def test_resource_version() -> None:
    assert resource_version({"metadata": {"resourceVersion": "42"}}) == "42"
    assert resource_version({"metadata": {"resourceVersion": 42}}) == "42"  # a number in a hand-written file
    assert resource_version({"metadata": {"resourceVersion": ""}}) == ""
    assert resource_version({"metadata": {}}) is None
    assert resource_version({}) is None
