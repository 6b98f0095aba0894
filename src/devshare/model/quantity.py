"""Kubernetes resource quantities (``16Gi``, ``6k``, ``500m``, ``1.5``, ``2e3``, ``15472384Ki``).

The grammar is the one of ``k8s.io/apimachinery/pkg/api/resource``: a signed decimal number
followed by an optional binary suffix (Ki Mi Gi Ti Pi Ei), decimal suffix (n u m "" k M G T P E)
or decimal exponent (e3, E-2). Values are kept exact with :class:`fractions.Fraction`.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from devshare.model.errors import InvalidQuantity

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_RE = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"  # linear: no overlapping digit runs to backtrack over
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE]?))$",
    re.ASCII,  # Kubernetes digits are 0-9 only (\d would also match e.g. Arabic-Indic digits)
)

MIB = 2**20
GIB = 2**30
MAX_QUANTITY_CHARS = 64  # longer is no quantity any device needs (and costs time to match)


def shown(value: object, limit: int = 64) -> str:
    """``repr(value)``, cut to ``limit`` characters: messages quote values that may be megabytes long."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 12]}...{text[-8:]} ({len(text)} characters)"


def parse_quantity(value: str | int | float, *, field: str | None = None) -> Fraction:
    """Parse a quantity into an exact number. Raises :class:`InvalidQuantity` with a message."""
    if isinstance(value, bool):
        raise InvalidQuantity(f"expected a quantity such as 16Gi or 500m, got {value!r}", field=field)
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidQuantity(f"expected a finite quantity, got {value!r}", field=field)
        return Fraction(str(value))
    if not isinstance(value, str):
        raise InvalidQuantity(
            f"expected a quantity string such as 16Gi or 500m, got {type(value).__name__}", field=field
        )
    text = value.strip()
    if len(text) > MAX_QUANTITY_CHARS:
        raise InvalidQuantity(
            f"{shown(value)} is not a Kubernetes quantity: it is {len(text)} characters long, a quantity is at "
            f"most {MAX_QUANTITY_CHARS} (e.g. 16Gi, 6k, 500m)", field=field)
    m = _RE.match(text)
    if not m:
        raise InvalidQuantity(
            f"{shown(value)} is not a Kubernetes quantity: write a number with an optional suffix "
            "(Ki Mi Gi Ti Pi Ei, or m k M G T P E), e.g. 16Gi, 6k, 500m",
            field=field,
        )
    number = Fraction(m.group("num"))
    if m.group("bin"):
        return number * _BINARY[m.group("bin")]
    if m.group("exp"):
        exponent = int(m.group("exp")[1:])
        if abs(exponent) > 30:
            raise InvalidQuantity(f"{shown(value)}: exponent {exponent} is out of range", field=field)
        return number * Fraction(10) ** exponent
    return number * _DECIMAL[m.group("dec") or ""]


def quantity_int(value: str | int | float, *, field: str | None = None) -> int:
    """Parse a quantity that must be a whole number (bytes, counts, percents)."""
    q = parse_quantity(value, field=field)
    if q.denominator != 1:
        raise InvalidQuantity(f"{shown(value)} must be a whole number (it is {float(q):g})", field=field)
    return int(q)


def format_bytes(n: int) -> str:
    """Render a byte count as a Kubernetes quantity, exact: the largest binary suffix that divides."""
    if n == 0:
        return "0"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        unit = _BINARY[suffix]
        if n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def human_bytes(n: int) -> str:
    """A short human form for messages: ``6 GiB``, ``512 MiB``, ``1.5 GiB``."""
    for suffix, unit in (("TiB", 2**40), ("GiB", GIB), ("MiB", MIB), ("KiB", 2**10)):
        if abs(n) >= unit:
            v = n / unit
            return f"{v:.0f} {suffix}" if v == int(v) else f"{v:.1f} {suffix}"
    return f"{n} B"
