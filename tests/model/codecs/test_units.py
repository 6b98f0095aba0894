"""Percent values on the wire: thousandths to percent and back, GPU index lists, JSON annotations."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.model.codecs.units import MAX_PERCENT, index_list, json_object, milli_of, percent, percent_text
from devshare.model.errors import InvalidAnnotation


def test_percent_is_fractional_only_when_it_must_be() -> None:
    assert percent(500) == 50 and isinstance(percent(500), int)
    assert percent(333) == 33.3
    assert (percent_text(1000), percent_text(5), percent_text(0)) == ("100", "0.5", "0")


@given(st.integers(0, MAX_PERCENT * 10))
def test_percent_reads_back_to_the_same_thousandths(milli: int) -> None:
    assert milli_of(percent(milli), field="f") == milli


@pytest.mark.parametrize("bad", [True, "50", None, -1, -0.1, MAX_PERCENT + 1, float("nan"), float("inf")])
def test_milli_of_refuses_what_is_no_percent(bad: object) -> None:
    with pytest.raises(InvalidAnnotation) as err:
        milli_of(bad, field="annotation x: core")
    assert str(err.value) == f"annotation x: core: expected a percent number from 0 to {MAX_PERCENT}, got {bad!r}"


def test_index_list() -> None:
    assert index_list("1,0,3", field="f") == [1, 0, 3]
    assert index_list(" 2 , 7", field="f") == [2, 7]


@pytest.mark.parametrize("bad", ["", "1,,2", "-1", "a", "1.5", "\u0661"])  # \u0661: an Arabic-Indic one
def test_index_list_refuses_what_is_no_index(bad: str) -> None:
    with pytest.raises(InvalidAnnotation) as err:
        index_list(bad, field="annotation idx")
    assert str(err.value) == f'annotation idx: {bad!r} must list GPU indexes separated by commas, e.g. "1,0"'


def test_json_object() -> None:
    assert json_object({"k": '{"a": 1}'}, "k", shape='{"a": 1}') == {"a": 1}
    assert json_object({}, "k", shape="{}") is None
    with pytest.raises(InvalidAnnotation, match=r"^annotation k: not JSON \(Expecting value"):
        json_object({"k": "{"[1:]}, "k", shape="{}")
    with pytest.raises(InvalidAnnotation, match=r'^annotation k: must be an object such as \{"gpu": \[0\]\}$'):
        json_object({"k": "[0]"}, "k", shape='{"gpu": [0]}')
