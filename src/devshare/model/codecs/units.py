"""Percent values on the wire: devshare counts thousandths (``core_milli``), annotations percent."""

from __future__ import annotations

import math
from typing import Any

from devshare.model.errors import InvalidAnnotation


def percent(milli: int) -> int | float:
    """``500`` -> ``50``; ``333`` -> ``33.3`` (fractional only when it must be)."""
    return milli // 10 if milli % 10 == 0 else milli / 10


def percent_text(milli: int) -> str:
    return str(percent(milli))


def milli_of(value: Any, *, field: str) -> int:
    """A percent number read back into thousandths (>= 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise InvalidAnnotation(f"expected a percent number >= 0, got {value!r}", field=field)
    return round(value * 10)


def index_list(text: str, *, field: str) -> list[int]:
    """``"1,0,3"`` -> ``[1, 0, 3]`` (GPU minors, each >= 0)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit():
            raise InvalidAnnotation(f'{text!r} must list GPU indexes separated by commas, e.g. "1,0"', field=field)
        out.append(int(part))
    return out
