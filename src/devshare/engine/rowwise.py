"""Reductions along the device axis of ``[rows, devices]`` arrays.

numpy reduces a short last axis slowly: ``any(axis=1)`` or ``sum(axis=1)`` of a 5,000 x 8 array
takes 70-90 us, about as long as the rest of a pod's fit. Combining the few columns one by one
takes a quarter of that (a contiguous 8-wide boolean row is one 64-bit word: a fiftieth). The
results are exactly numpy's (integers and booleans only: float sums would change in their last
bits with the order of addition).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

Mask = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.int64]
FEW = 256  # rows below which numpy's own reduction is cheaper than a Python loop over the columns


def any_per_row(m: Mask) -> Mask:
    """``m.any(axis=1)``."""
    n, w = m.shape
    if w == 8 and m.flags.c_contiguous and m.dtype == np.bool_:
        return np.asarray(m.view(np.uint64)[:, 0] != 0)
    if w == 0 or n < FEW:
        return np.asarray(m.any(axis=1), np.bool_)
    out = m[:, 0].copy()
    for j in range(1, w):
        out |= m[:, j]
    return out


def sum_per_row(a: npt.NDArray[Any]) -> Ints:
    """``a.sum(axis=1)`` of an integer or boolean array, as int64."""
    n, w = a.shape
    if w == 8 and a.flags.c_contiguous and a.dtype == np.bool_:
        return np.bitwise_count(a.view(np.uint64)[:, 0]).astype(np.int64)  # one bit set per True byte
    if w == 0 or n < FEW:
        return np.asarray(a.sum(axis=1, dtype=np.int64), np.int64)
    out = a[:, 0].astype(np.int64)
    for j in range(1, w):
        out += a[:, j]
    return out
