"""Helpers shared by the commands: turning bad input into a clear message and exit code 2, connecting
to a cluster, printing tables.

Exit codes, the same for every command (README.md, "Commands"):

====  ===========================================================================================
code  meaning
====  ===========================================================================================
0     done; for ``devshare schedule``: every pod placed
1     ``devshare schedule``: some valid pods fit nowhere (each with its reason); a server stopped
      by an error after it started
2     bad input: a bad command line, an unreadable or invalid file, a pod the webhook would
      refuse (``schedule`` still prints every placement), no cluster to connect to
130   interrupted (Ctrl-C)
====  ===========================================================================================
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
import yaml

from devshare.model.errors import InvalidInput, yaml_error
from devshare.sim import solver

if TYPE_CHECKING:
    from devshare.kube.rest import KubeClient

T = TypeVar("T")

EXIT_OK = 0
EXIT_UNSCHEDULABLE = 1
EXIT_BAD_INPUT = 2

solver.install()  # a command's stdout (schedule's JSON, simulate's report) carries no HiGHS banner

# options shared by the commands that read a real cluster
KubeconfigOption = Annotated[
    Path | None,
    typer.Option(help="Kubeconfig of a real cluster (default without --cluster: in-cluster, $KUBECONFIG or "
                 "~/.kube/config)."),
]
ContextOption = Annotated[str | None, typer.Option(help="Kubeconfig context to use.")]
ConfigOption = Annotated[
    Path | None,
    typer.Option("--config", help="A DevshareConfiguration YAML (devshare.io/v1alpha1): device types, policies, "
                 "weights, limits (docs/configuration.md; `devshare config defaults` prints one)."),
]
# the servers' event loop (devshare.server.eventloop)
EventLoopOption = Annotated[
    str,
    typer.Option(help="The event loop the server runs on: auto (uvloop where it is installed, as it is with "
                 "devshare), uvloop or asyncio (the standard library's)."),
]


LogLevelOption = Annotated[str, typer.Option(help="debug, info, warning or error.")]


def log_level(text: str) -> int:
    """``--log-level``'s value as a logging level, or the CLI's error."""
    import logging

    level = logging.getLevelNamesMapping().get(text.upper())
    if text.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR") or level is None:
        raise fail(f"unknown --log-level {text!r}: use debug, info, warning or error")
    return level


def check_event_loop(kind: str) -> None:
    """Raise the CLI's error for an --event-loop that is not one of the known kinds, or that cannot be
    made here (uvloop asked for where it is not installed): before serving, never a stack trace."""
    from devshare.server.eventloop import EVENT_LOOPS, new_event_loop

    if kind not in EVENT_LOOPS:
        raise fail(f"unknown --event-loop {kind!r}: use one of {', '.join(EVENT_LOOPS)}")
    try:
        new_event_loop(kind).close()
    except ValueError as e:
        raise fail(f"--event-loop {kind}: {e}") from None


def fail(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    """Print ``error: message`` on stderr and return the Exit to raise."""
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn bad input (InvalidInput, missing files, bad YAML/JSON, binary files) into one clear line, exit 2."""
    try:
        yield
    except InvalidInput as e:
        raise fail(str(e)) from None
    except FileNotFoundError as e:
        raise fail(f"{e.filename}: no such file") from None
    except IsADirectoryError as e:
        raise fail(f"{e.filename}: is a directory, expected a file") from None
    except PermissionError as e:
        raise fail(f"{e.filename}: permission denied") from None
    except yaml.YAMLError as e:
        raise fail(str(yaml_error(e, "input"))) from None
    except json.JSONDecodeError as e:
        raise fail(f"not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    except UnicodeDecodeError as e:  # a binary file given where YAML or JSON is read
        raise fail(f"a file given is not a text file (byte {e.object[e.start]:#04x} at position {e.start} is not "
                   "UTF-8): give a YAML or JSON file") from None


def emit(data: Any, fmt: str, table: Callable[[Any], None] | None = None) -> None:
    """Print ``data`` as json, yaml, or (when given) a table."""
    if fmt == "json":
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif fmt == "yaml":
        sys.stdout.write(yaml.safe_dump(data, sort_keys=False))
    elif fmt == "table" and table is not None:
        table(data)
    else:
        raise fail(f"unknown output format {fmt!r}: use json, yaml" + (" or table" if table else ""))


def load_cluster(path: Path) -> Any:
    """The in-memory backend of a ``--cluster`` file; a file with no object at all is refused (it is
    almost always the wrong file, and everything would silently be unschedulable)."""
    from devshare.kube.memory import MemoryBackend

    backend = MemoryBackend.load(path)
    if not backend.objects():
        raise InvalidInput("no Node, Device or Pod object in the file: give a multi-document YAML of them "
                           "(examples/cluster.yaml is one)", field=str(path))
    return backend


NO_CLUSTER_HINT = ("or give --cluster FILE, a multi-document YAML of Node, Device and Pod objects served from "
                   "memory (examples/cluster.yaml is one), to run without a cluster")


def connect_live(kubeconfig: Path | None, **kw: Any) -> KubeClient:
    """The client of a kubeconfig's API server (None: in-cluster, $KUBECONFIG or ~/.kube/config); when no
    configuration can be loaded, the error says how to run without a cluster too (``--cluster FILE``)."""
    from devshare.kube.rest import KubeClient

    try:
        return KubeClient.connect(kubeconfig, **kw)
    except InvalidInput as e:
        raise InvalidInput(f"{e.message}; {NO_CLUSTER_HINT}", field=e.field) from None


def table_console() -> Any:
    """The console tables are printed on. On a terminal, its width. Piped or redirected with no
    ``COLUMNS`` set, as wide as the table needs: rich would otherwise assume 80 columns and wrap
    headers and cells ("paper / (10 / seeds)"), which no script or reader wants."""
    import os

    from rich.console import Console

    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return Console()
    return Console(width=10_000, no_color=True, highlight=False)
