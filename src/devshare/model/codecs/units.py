"""Percent values on the wire: devshare counts thousandths (``core_milli``), annotations percent."""

from __future__ import annotations

import json
from typing import Any

from devshare.model.errors import InvalidAnnotation

MAX_PERCENT = 10**9  # far above any device's 100 percent; keeps the numbers finite


def percent(milli: int) -> int | float:
    """``500`` -> ``50``; ``333`` -> ``33.3`` (fractional only when it must be)."""
    return milli // 10 if milli % 10 == 0 else milli / 10


def percent_text(milli: int) -> str:
    return str(percent(milli))


def milli_of(value: Any, *, field: str) -> int:
    """A percent number read back into thousandths (>= 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_PERCENT:
        raise InvalidAnnotation(f"expected a percent number from 0 to {MAX_PERCENT}, got {value!r}", field=field)
    return round(value * 10)


def index_list(text: str, *, field: str) -> list[int]:
    """``"1,0,3"`` -> ``[1, 0, 3]`` (GPU minors, each >= 0)."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not (part.isascii() and part.isdigit()):
            raise InvalidAnnotation(f'{text!r} must list GPU indexes separated by commas, e.g. "1,0"', field=field)
        out.append(int(part))
    return out


def json_object(annotations: dict[str, str], key: str, *, shape: str) -> dict[str, Any] | None:
    """The JSON object under annotation ``key``; None when absent; ``shape`` shows what it must look like."""
    text = annotations.get(key)
    if text is None:
        return None
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, TypeError) as e:
        raise InvalidAnnotation(f"not JSON ({e})", field=f"annotation {key}") from e
    if not isinstance(doc, dict):
        raise InvalidAnnotation(f"must be an object such as {shape}", field=f"annotation {key}")
    return doc
