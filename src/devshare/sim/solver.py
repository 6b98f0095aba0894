"""HiGHS without its banner: the first solver a process makes prints one on stdout from C, which would
land in ``devshare schedule``'s JSON and ``simulate``'s report. :func:`install` makes the engine's
solvers (:data:`devshare.engine.policies.pairing.make_solver`) through :func:`quiet_highs`."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from typing import Any

from devshare.engine.policies import pairing


def quiet_highs() -> Any:
    """A ``highspy.Highs`` made with fd 1 pointing at /dev/null, C's buffers flushed before it is back."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        return pairing.plain_highs()
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            h = pairing.plain_highs()
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None).fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    return h


def install() -> None:
    """Make every solver of this process quiet."""
    pairing.make_solver = quiet_highs
