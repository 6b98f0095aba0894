"""What Kubernetes accepts as a name and a namespace (DNS-1123 subdomain and label, as
k8s.io/apimachinery's validation says), checked before a name goes into an API request's path; and
how an object is keyed."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.model.errors import InvalidInput
from devshare.model.kubeobjects import (
    LABEL_MAX,
    SUBDOMAIN_MAX,
    check_name,
    check_namespace,
    label_problem,
    meta,
    object_key,
    subdomain_problem,
)

LABEL_RULE = "must be lowercase letters, digits and '-', starting and ending with a letter or digit (a DNS-1123 label)"
SUBDOMAIN_RULE = ("must be lowercase letters, digits, '-' and '.', starting and ending with a letter or digit "
                  "(a DNS-1123 subdomain)")


@pytest.mark.parametrize("ok", ["default", "kube-system", "a", "0", "a" * LABEL_MAX])
def test_valid_namespaces(ok: str) -> None:
    assert label_problem(ok) is None and check_namespace(ok) == ok


@pytest.mark.parametrize(("bad", "problem"), [
    ("", "must be a non-empty string"),
    (None, "must be a non-empty string"),
    (7, "must be a non-empty string"),
    ("a" * (LABEL_MAX + 1), f"must be at most {LABEL_MAX} characters, has {LABEL_MAX + 1}"),
    ("Default", LABEL_RULE),
    ("a.b", LABEL_RULE),  # a subdomain, not a label
    ("-a", LABEL_RULE),
    ("a-", LABEL_RULE),
    ("ns\r\nGET", LABEL_RULE),
    ("\u0430", LABEL_RULE),  # Cyrillic a
])
def test_invalid_namespaces(bad: object, problem: str) -> None:
    assert label_problem(bad) == problem


@pytest.mark.parametrize("ok", ["p", "pod-1", "web.example.com", "0.0", "a" * SUBDOMAIN_MAX])
def test_valid_names(ok: str) -> None:
    assert subdomain_problem(ok) is None and check_name(ok) == ok


@pytest.mark.parametrize(("bad", "problem"), [
    ("", "must be a non-empty string"),
    ("a" * (SUBDOMAIN_MAX + 1), f"must be at most {SUBDOMAIN_MAX} characters, has {SUBDOMAIN_MAX + 1}"),
    ("../secrets", SUBDOMAIN_RULE),
    ("kube-system/pods/x", SUBDOMAIN_RULE),
    ("p q", SUBDOMAIN_RULE),
    ("p\r\nDELETE /api/v1/namespaces/kube-system/pods/x HTTP/1.1", SUBDOMAIN_RULE),
    ("a..b", SUBDOMAIN_RULE),
    (".a", SUBDOMAIN_RULE),
    ("Pod", SUBDOMAIN_RULE),
])
def test_invalid_names(bad: object, problem: str) -> None:
    assert subdomain_problem(bad) == problem


def test_the_error_shows_the_value_and_names_the_field() -> None:
    with pytest.raises(InvalidInput) as err:
        check_name("p\r\nx", what="/bind PodName")
    assert str(err.value) == f"/bind PodName: 'p\\r\\nx' is not a valid Kubernetes object name: {SUBDOMAIN_RULE}"
    with pytest.raises(InvalidInput) as err:
        check_namespace("A", what="/bind PodNamespace")
    assert str(err.value) == f"/bind PodNamespace: 'A' is not a valid Kubernetes namespace: {LABEL_RULE}"


def test_a_long_value_is_shown_shortened() -> None:
    with pytest.raises(InvalidInput) as err:
        check_name("X" * 5000)
    assert str(err.value).startswith(f"name: '{'X' * 59}...(5002 characters) is not a valid Kubernetes object name: ")
    assert len(str(err.value)) < 300


@given(st.text("az09.-/ \r\n%?#A\u0430", max_size=20) | st.text(max_size=80))
def test_an_accepted_name_cannot_reach_outside_its_path_segment(text: str) -> None:
    """Whatever is accepted holds no '/', whitespace, '%', '?', '#' or control character: it names
    one object in a request path and cannot split the request."""
    if subdomain_problem(text) is None:
        assert re.fullmatch(r"[a-z0-9.-]+", text)
    if label_problem(text) is None:
        assert re.fullmatch(r"[a-z0-9-]+", text) and subdomain_problem(text) is None


def test_object_keys() -> None:
    assert object_key({"metadata": {"namespace": "ns", "name": "p"}}) == "ns/p"
    assert object_key({"metadata": {"name": "node-1"}}) == "node-1"
    assert object_key({"metadata": "x"}) == ""
    assert meta({"metadata": ["x"]}) == {} and meta({}) == {}
    assert meta({"metadata": {"name": "a"}}) == {"name": "a"}
