"""The extender protocol's score scale: kube-scheduler reads priorities 0..10
(``MaxExtenderPriority``). The engine scores on its own scale (raw floats, higher is better); the
wire scale is made here, at the edge."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

MAX_SCORE = 10  # kube-scheduler's extender priority range is 0..MAX_SCORE
PLANNED_SCORE = MAX_SCORE  # a group member's planned node; every other node scores 0

Ints = npt.NDArray[np.int64]


def normalize(scores: npt.NDArray[np.float64], ok: npt.NDArray[np.bool_]) -> Ints:
    """Raw scores -> 0..10 over the fitting nodes (min-max; equal scores all get 10; unfit: 0)."""
    out = np.zeros(scores.shape, np.int64)
    if not ok.any():
        return out
    s = scores[ok]
    lo, hi = float(s.min()), float(s.max())
    if hi - lo < 1e-12:
        out[ok] = MAX_SCORE
    else:
        out[ok] = np.rint((s - lo) / (hi - lo) * MAX_SCORE).astype(np.int64)
    return out


def scores_from(raw: npt.NDArray[np.float64]) -> Ints:
    """Scores 0..10 from the raw scores of nodes that all fit."""
    return normalize(raw, np.ones(raw.shape, np.bool_))
