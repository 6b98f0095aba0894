"""Every command block of README.md and docs/deploy.md is run as pasted and its exit code checked, or
says (an HTML comment before it, `<!-- not run: why -->`) why it cannot be; issue 40.

How each is run (the comment before it names it): `try-it` here, with a free port for 8888;
`fresh-clone` here, in a copy of the checkout with a new venv; `cluster` and `helm` here, on a real
control plane (tests/e2e's binaries: marker e2e); `helm-install` by tests/e2e/test_helm.py and
`tests/e2e/test_uninstall.py` by that test, which parse the block from the file.
"""

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
DOCS = ("README.md", "docs/deploy.md")
RUN_HERE = {"try-it", "fresh-clone", "cluster", "helm"}
RUN_ELSEWHERE = {"helm-install": "tests/e2e/test_helm.py", "tests/e2e/test_uninstall.py": "tests/e2e/test_uninstall.py"}
BLOCK = re.compile(r"(?:<!-- ([^>]*?) -->\n\s*)?```sh\n(.*?)```", re.S)


def blocks(doc: str) -> list[tuple[str, str]]:
    """(the comment before it, the block) for every sh block of ``doc``, indentation removed."""
    out = []
    for m in BLOCK.finditer((ROOT / doc).read_text()):
        body = "\n".join(line[3:] if line.startswith("   ") else line for line in m.group(2).splitlines())
        out.append(((m.group(1) or "").strip(), body + "\n"))
    return out


def how(marker: str) -> str:
    """``run: cluster (...)`` -> ``cluster``; ``try-it`` -> ``try-it``; ``helm-install: ...`` -> ``helm-install``."""
    word = marker.removeprefix("run:").strip().split(" ", 1)[0].rstrip(":")
    return word


def test_every_block_is_run_or_says_why() -> None:
    for doc in DOCS:
        for marker, body in blocks(doc):
            assert marker, f"{doc}: a block with no <!-- run: ... --> or <!-- not run: why --> before it:\n{body}"
            if marker.startswith("not run:"):
                assert len(marker) > len("not run: ") + 10, (doc, marker)
                continue
            kind = how(marker)
            assert kind in RUN_HERE or kind in RUN_ELSEWHERE, (doc, marker)
            if kind in RUN_ELSEWHERE:
                runner = (ROOT / RUN_ELSEWHERE[kind]).read_text()
                assert doc in runner or "README" in runner, (doc, marker)


def test_the_whole_check_is_what_ci_runs() -> None:
    """README's second block is not run here (it is this suite): .ci/run runs it verbatim."""
    (check,) = [b for m, b in blocks("README.md") if m.startswith("not run: it is the whole check")]
    assert check.strip() in (ROOT / ".ci" / "run").read_text()


def test_no_design_is_called_by_a_seed_number() -> None:
    """Issue 40: a reader does not know what "seed 000" is; README and docs name the systems."""
    for doc in ("README.md", *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "docs").glob("*.md")))):
        found = re.findall(r"\b[Ss]eeds? 00[0-4]\b", (ROOT / doc).read_text())
        assert not found, (doc, found)


def block(doc: str, kind: str) -> list[str]:
    found = [b for m, b in blocks(doc) if not m.startswith("not run:") and how(m) == kind]
    assert found, f"{doc} lost its <!-- run: {kind} --> block(s)"
    return found


def try_it_block() -> str:
    (b,) = block("README.md", "try-it")
    return b


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


def repo_copy(dest: Path) -> Path:
    """The checkout's tracked and new files (what a clone has, plus this change), without its .venv."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.splitlines()
    for f in files:
        src = ROOT / f
        if src.is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / f)
    return dest


@pytest.mark.skipif(os.environ.get("DEVSHARE_SKIP_FRESH_CLONE") == "1", reason="DEVSHARE_SKIP_FRESH_CLONE=1")
def test_the_first_block_installs_and_simulates_in_a_fresh_clone(tmp_path: Path) -> None:
    """README's first command, as pasted, in a copy of the checkout: a new venv, `pip install .` (from
    the package registry), and the default `devshare simulate` (minutes of CPU: docs/simulate.md)."""
    (first,) = block("README.md", "fresh-clone")
    clone = repo_copy(tmp_path / "devshare")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", first], cwd=clone, env=env, capture_output=True, text=True,
                       timeout=1800)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    assert "unallocated GPU % at 100% arrival" in r.stdout
    assert (clone / "simulate.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.e2e
def test_the_deploy_guide_on_a_real_control_plane(tmp_path: Path) -> None:
    """docs/deploy.md's `cluster` blocks, in order, on a control plane with deploy/ installed (as its
    install step does) and devshare's extender and kube-scheduler running; its `helm` block on a
    second one. Each block as pasted, from a folder holding the guide's files (first-share.yaml is the
    YAML block before the one that applies it)."""
    import yaml

    from e2e.cluster import control_plane

    work = tmp_path / "work"
    work.mkdir()
    for name in ("deploy", "examples"):
        (work / name).symlink_to(ROOT / name)
    guide = (ROOT / "docs" / "deploy.md").read_text()
    first_share = re.search(r"```yaml\n(apiVersion: v1\nkind: Pod\nmetadata:\n  name: first-share.*?)```", guide, re.S)
    assert first_share, "docs/deploy.md lost its first-share pod"
    (work / "first-share.yaml").write_text(first_share.group(1))
    assert yaml.safe_load(first_share.group(1))["spec"]["schedulerName"] == "devshare-scheduler"

    def run_blocks(kind: str, admin: Path, bin_dir: Path) -> list[str]:
        env = {**os.environ, "KUBECONFIG": str(admin), "PATH": os.pathsep.join(
            [str(bin_dir), str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
        env.update({f"HELM_{k}_HOME": str(tmp_path / f"helm-{k.lower()}") for k in ("CACHE", "CONFIG", "DATA")})
        outs = []
        for b in block("docs/deploy.md", kind):
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", b], cwd=work, env=env, capture_output=True,
                               text=True, timeout=300)
            assert r.returncode == 0, (b, r.stdout[-2000:], r.stderr[-2000:])
            outs.append(r.stdout)
        return outs

    with control_plane(tmp_path / "plane") as cp:
        cp.install()  # the guide's step 2, without the rollout status no kubelet can satisfy
        cp.namespace("default")  # its ServiceAccount, which a cluster's controller-manager would make
        cp.start_extender()
        cp.start_scheduler()
        outs = run_blocks("cluster", cp.admin, cp.bin)
        assert "gpu-node-1" in outs[0]  # kubectl get devices
        assert "first-share" in outs[1]
        assert any('"nodes"' in o for o in outs)  # devshare inspect -o json
    with control_plane(tmp_path / "helm-plane") as cp:
        run_blocks("helm", cp.admin, cp.bin)
        config = cp.get("configmap", "devshare-config", "-n", "devshare-system")["data"]["devshare-config.yaml"]
        assert yaml.safe_load(config)["scheduling"]["coreWeight"] == 20
