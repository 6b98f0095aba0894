"""The image, checked without a container runtime (issue 40): the Dockerfile copies files that exist,
installs this package, whose ``devshare`` entry point is the one the manifests and the chart run, and
every devshare command line in deploy/ and the chart names a subcommand and options that exist.

(No daemon runs in CI, and no base image can be pulled there: a build would need both. This checks what
a build could get wrong from this repository's side.)
"""

from __future__ import annotations

import json
import shlex
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.main import get_command

from deploy.test_helm import HELM, render
from devshare.cli.main import app
from support import REPO

DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) per line of the Dockerfile, comments and continuations handled."""
    out: list[tuple[str, str]] = []
    for line in DOCKERFILE.read_text().replace("\\\n", " ").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_every_file_the_dockerfile_copies_exists() -> None:
    copies = [rest for word, rest in instructions() if word in ("COPY", "ADD")]
    assert copies, "the Dockerfile copies nothing"
    for rest in copies:
        parts = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
        sources = [p for p in parts[:-1] if not p.startswith("--")]
        for src in sources:
            assert (REPO / src).exists(), f"the Dockerfile copies {src}, which is not in the repository"


def test_the_dockerfile_installs_the_package_whose_entry_point_the_manifests_run() -> None:
    steps = instructions()
    workdir = next(rest for word, rest in steps if word == "WORKDIR")
    runs = [rest for word, rest in steps if word == "RUN"]
    assert any("pip install" in r and r.split()[-1] in (".", workdir) for r in runs), runs
    assert "pyproject.toml" in " ".join(rest for word, rest in steps if word == "COPY")
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"devshare": "devshare.cli.main:main"}
    (entrypoint,) = [json.loads(rest) for word, rest in steps if word == "ENTRYPOINT"]
    assert entrypoint == ["devshare"]
    base = next(rest for word, rest in steps if word == "FROM")
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert base.startswith("python:3.11") and "3.11" in requires, (base, requires)


def containers(objs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for obj in objs:
        spec = obj.get("spec", {})
        pod = spec.get("template", {}).get("spec", spec) if obj["kind"] != "Pod" else spec
        for c in pod.get("containers", []) or []:
            yield f"{obj['kind']}/{obj['metadata']['name']}/{c['name']}", c


def devshare_command_lines(objs: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The devshare command line of every container running the devshare image (the entry point
    ``devshare`` followed by the args, or a command that starts with ``devshare``)."""
    out = []
    for where, c in containers(objs):
        if not str(c.get("image", "")).split("/")[-1].startswith("devshare"):
            continue
        command, args = [str(x) for x in c.get("command") or []], [str(x) for x in c.get("args") or []]
        if command and command[0] != "devshare":
            assert command[0] == "python", (where, command)  # the helm test's script: the image's Python
            continue
        out.append((where, (command[1:] if command else []) + args))
    return out


def check_command_line(where: str, argv: list[str]) -> None:
    """``argv`` (after ``devshare``) names a subcommand and only options it has."""
    cmd: Any = get_command(app)
    words = list(argv)
    while hasattr(cmd, "commands") and not (words and words[0].startswith("-") and cmd.params):
        # a group whose own options come first runs itself (devshare webhook --tls-cert=...)
        assert words and words[0] in cmd.commands, f"{where}: devshare has no command {words[:1]} ({argv})"
        cmd = cmd.commands[words.pop(0)]
    known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    for w in words:
        if w.startswith("--"):
            assert w.split("=", 1)[0] in known, f"{where}: devshare {' '.join(argv[:2])} has no option {w}"


def deploy_objects() -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for path in sorted((REPO / "deploy").glob("*/*.yaml")):
        objs += [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and "kind" in d]
    return objs


def test_the_manifests_run_commands_the_image_has() -> None:
    lines = devshare_command_lines(deploy_objects())
    assert {w.split("/")[1] for w, _ in lines} >= {"devshare-scheduler", "devshare-webhook", "devshare-agent"}
    for where, argv in lines:
        check_command_line(where, argv)


@pytest.mark.skipif(HELM is None, reason="no helm binary")
def test_the_chart_runs_commands_the_image_has() -> None:
    objs = render("logLevel=debug", "scheduler.metricsPort=9888", hooks=True)
    lines = devshare_command_lines(objs)
    assert len(lines) == 3, lines
    for where, argv in lines:
        check_command_line(where, argv)
    assert Path(REPO / "deploy/helm/devshare/files/helm-test.py").is_file()
