"""HiGHS without its banner (:mod:`devshare.sim.solver`): a command's stdout carries its report or JSON
only. The banner is printed once per process, by the first solver made, so each case runs in its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from devshare.engine.policies import pairing
from devshare.sim import solver
from support import REPO


def stdout_of(code: str) -> str:
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_the_first_solver_of_a_process_prints_no_banner_and_stdout_still_works() -> None:
    plain = stdout_of("from devshare.engine.policies import pairing\npairing.plain_highs()\nprint('report')")
    assert "HiGHS" in plain  # what the module exists to keep out of a report
    quiet = stdout_of("import sys\nprint('before', flush=False)\nfrom devshare.sim import solver\n"
                      "h = solver.quiet_highs()\nprint('after')\nprint(type(h).__name__)")
    assert quiet == "before\nafter\nHighs\n"  # buffered output before it is kept, in order


def test_installed_every_engine_solver_is_made_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pairing, "make_solver", pairing.plain_highs)
    solver.install()
    assert pairing.make_solver is solver.quiet_highs
    h = pairing.highs()
    assert type(h).__name__ == "Highs"
    assert stdout_of("from devshare.sim import solver\nfrom devshare.engine.policies import pairing\n"
                     "solver.install()\npairing.highs()\nprint('json')") == "json\n"
