"""The problem collector: readers keep going past the first problem, and every one is reported."""

from __future__ import annotations

import pytest

from devshare.model.errors import InvalidRequest
from devshare.model.problems import Problems


def test_empty_is_falsy_and_raises_nothing() -> None:
    p = Problems()
    assert not p and len(p) == 0 and p.messages() == []
    p.raise_if_any()


def test_each_problem_names_where_it_is() -> None:
    p = Problems()
    p.add("container 'c'", "nvidia.com/gpu is -1")
    p.extend("pod", ["first", "second"])
    assert p and len(p) == 3
    assert p.messages() == ["container 'c': nvidia.com/gpu is -1", "pod: first", "pod: second"]
    assert all(isinstance(i, InvalidRequest) for i in p.items)


def test_one_problem_is_raised_as_it_is() -> None:
    p = Problems()
    p.add("container 'c'", "bad")
    with pytest.raises(InvalidRequest) as err:
        p.raise_if_any()
    assert err.value is p.items[0] and err.value.field == "container 'c'"


def test_several_problems_are_raised_together() -> None:
    p = Problems()
    p.add("a", "one")
    p.add("b", "two")
    with pytest.raises(InvalidRequest) as err:
        p.raise_if_any()
    assert str(err.value) == "2 problems: a: one; b: two"
