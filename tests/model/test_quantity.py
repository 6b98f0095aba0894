"""Kubernetes quantities: the forms the seeds use, and clear errors for the rest."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devshare.model.errors import InvalidInput, InvalidQuantity
from devshare.model.quantity import format_bytes, human_bytes, parse_quantity, quantity_int


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("16Gi", 16 * 2**30),
        ("6k", 6000),
        ("500m", Fraction(1, 2)),
        ("15472384Ki", 15472384 * 1024),  # seed 001's Device example
        ("1.5", Fraction(3, 2)),
        ("2e3", 2000),
        ("2E3", 2000),
        ("1e-2", Fraction(1, 100)),
        ("2E", 2 * 10**18),  # E alone is exa, not an exponent
        ("1.5Ki", 1536),
        (".5", Fraction(1, 2)),
        ("5.", 5),
        ("+5", 5),
        ("-20", -20),  # seed 000's bad mgpu-core: parses, the rules refuse it
        ("128", 128),
        ("100u", Fraction(1, 10**4)),
        ("3n", Fraction(3, 10**9)),
        ("1M", 10**6),
        ("1Mi", 2**20),
        ("  16Gi ", 16 * 2**30),
        (7, 7),
        (2.5, Fraction(5, 2)),
    ],
)
def test_parse(text: str | int | float, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "16gi", "16 Gi", "1e", "abc", "1.2.3", "--1", "0x10", "1Kii", "∞", "١٢"])
def test_bad_strings_say_what_a_quantity_looks_like(text: str) -> None:
    with pytest.raises(InvalidQuantity) as err:
        parse_quantity(text, field="vke.volcengine.com/mgpu-memory")
    assert "is not a Kubernetes quantity" in err.value.message
    assert "16Gi" in err.value.message  # an example of what to write
    assert str(err.value).startswith("vke.volcengine.com/mgpu-memory: ")


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}, float("nan"), float("inf")])
def test_bad_types(value: object) -> None:
    with pytest.raises(InvalidQuantity):
        parse_quantity(value)  # type: ignore[arg-type]


def test_exponent_out_of_range() -> None:
    with pytest.raises(InvalidQuantity, match="out of range"):
        parse_quantity("1e400")


def test_long_input_is_refused_quickly() -> None:
    # the number pattern used to backtrack quadratically on a long run of digits
    with pytest.raises(InvalidQuantity):
        parse_quantity("1" * 200_000 + "x")


def test_quantity_int() -> None:
    assert quantity_int("6k") == 6000
    assert quantity_int("16Gi") == 16 * 2**30
    with pytest.raises(InvalidQuantity, match="whole number"):
        quantity_int("500m", field="koordinator.sh/gpu-core")


def test_errors_are_invalid_input() -> None:
    assert issubclass(InvalidQuantity, InvalidInput)


def test_format_bytes() -> None:
    assert format_bytes(0) == "0"
    assert format_bytes(8 * 2**30) == "8Gi"
    assert format_bytes(15472384 * 1024) == "15472384Ki"
    assert format_bytes(1000) == "1000"
    assert human_bytes(6 * 2**30) == "6 GiB"
    assert human_bytes(512 * 2**20) == "512 MiB"
    assert human_bytes(3 * 2**29) == "1.5 GiB"


@given(st.integers(min_value=0, max_value=2**70))
def test_format_bytes_round_trips(n: int) -> None:
    assert parse_quantity(format_bytes(n)) == n


@given(st.integers(min_value=-(10**12), max_value=10**12), st.sampled_from(["", "k", "M", "G", "m", "Ki", "Mi", "Gi"]))
def test_integer_with_suffix(n: int, suffix: str) -> None:
    scale = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "m": Fraction(1, 1000), "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    assert parse_quantity(f"{n}{suffix}") == n * scale[suffix]


@given(st.text(max_size=30))
def test_any_text_parses_or_raises_invalid_quantity(text: str) -> None:
    try:
        value = parse_quantity(text)
    except InvalidQuantity as e:
        assert e.message
    else:
        assert isinstance(value, Fraction)
