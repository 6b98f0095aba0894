"""The README's "Try it" block runs as written (with a free port instead of 8888)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO

ROOT = REPO


def try_it_block() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"<!-- try-it -->\n```sh\n(.*?)```", text, re.S)
    assert m, "README.md lost its <!-- try-it --> block"
    return m.group(1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(shutil.which("curl") is None, reason="the README block uses curl, which is not installed")
def test_try_it_block_runs_as_written() -> None:
    block = try_it_block()
    assert "../shared" not in block
    port = free_port()
    env = dict(os.environ)
    # the block puts $PWD/.venv/bin first; the interpreter running the tests may live elsewhere
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", block.replace("8888", str(port))], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    out = r.stdout
    assert '{"gpus": [0, 1, 2, 3], "bottleneck": 48.33, "total": 434.03}' in out
    assert "kind: Device" in out or '"kind": "Device"' in out
    inspects = [json.loads(line) for line in out.splitlines() if line.startswith('{"nodes"')]
    assert len(inspects) == 2

    def holders(snapshot: dict[str, object]) -> set[str]:
        nodes = snapshot["nodes"]
        assert isinstance(nodes, list)
        return {p for n in nodes for d in n["devices"] for p in d["pods"]}

    assert "team-b/trainer/main" not in holders(inspects[0])
    assert "team-b/trainer/main" in holders(inspects[1])
    assert '{"Error":""}' in out
