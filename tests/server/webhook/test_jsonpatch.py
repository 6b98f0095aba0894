"""RFC 6902 operations and RFC 6901 pointers (server/webhook/jsonpatch.py), as the mutating webhook
writes them into its AdmissionReview responses."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from devshare.server.webhook.jsonpatch import add, escape, pointer, remove


def tokens_of(path: str) -> list[str]:
    """An RFC 6901 pointer read back (section 4: ``~1`` to ``/`` first, then ``~0`` to ``~``)."""
    assert path.startswith("/"), path
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def test_annotation_keys_and_indices() -> None:
    assert pointer("spec", "containers", 0, "resources") == "/spec/containers/0/resources"
    key = pointer("metadata", "annotations", "devshare.io/allocation")
    assert key == "/metadata/annotations/devshare.io~1allocation"
    assert escape("a~b/c") == "a~0b~1c"
    assert pointer() == ""  # the whole document


def test_tilde_is_escaped_before_slash() -> None:
    """The other order would write ``~1`` as ``~01`` and then read back as ``/``: another key."""
    assert escape("~1") == "~01"
    assert escape("/") == "~1"
    assert tokens_of(pointer("~1")) == ["~1"]


@given(st.lists(st.one_of(st.text(), st.integers(min_value=0)), max_size=6))
def test_every_pointer_reads_back_as_its_tokens(tokens: list[str | int]) -> None:
    path = pointer(*tokens)
    if tokens:
        assert tokens_of(path) == [str(t) for t in tokens]
    else:
        assert path == ""


def test_operations() -> None:
    assert add("/spec/schedulerName", "devshare") == {"op": "add", "path": "/spec/schedulerName",
                                                      "value": "devshare"}
    assert add("/spec/schedulingGates/-", {"name": "g"}) == {"op": "add", "path": "/spec/schedulingGates/-",
                                                            "value": {"name": "g"}}
    assert remove("/metadata/annotations/x") == {"op": "remove", "path": "/metadata/annotations/x"}
