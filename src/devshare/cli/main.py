"""Entry point: ``devshare <command>``.

Every module of this package other than this one defines ``register(app: typer.Typer)`` and adds
its command(s); they are found here, so a new command is one new module.

Bad command lines (an unknown flag, a missing option, a value of the wrong type) get the same one
line ``error: ...`` and exit code 2 as bad input files, instead of typer's boxed usage panel; and
``--help`` names values in capitals (``FILE``, ``N``, ``TEXT``) rather than typer's ``<path>``,
``<bool>`` or ``{pods}`` placeholders. Help is click's plain layout (``rich_markup_mode=None``): it
wraps to any width and never cuts a word with "…", as rich's boxed panels did at 80 columns
(``leaderElection.resourceNam…``); it carries no box characters when piped.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Sequence
from typing import Any, get_args, get_origin

import typer
from typer.core import TyperGroup

import devshare.cli as _pkg

try:  # typer >= 0.22 vendors click
    from typer._click import exceptions as _click_exc
except ImportError:  # pragma: no cover - older typer depends on click
    from click import exceptions as _click_exc  # type: ignore[no-redef]

# typer's type label -> the capitalised placeholder shown in --help
_METAVARS = {"path": "FILE", "str": "TEXT", "int": "N", "float": "NUMBER", "bool": "", "datetime": "TIME"}


def _label(param: Any) -> str | None:
    """A capitalised placeholder for ``param``'s value ("" for a flag), or None to keep typer's."""
    if getattr(param, "is_flag", False) or getattr(param, "count", False):
        return ""
    desc = getattr(param, "type_descriptor", None)
    if desc is None:
        return None
    annotation = desc.annotation
    if get_origin(annotation) is list:  # a repeatable option: the placeholder of one value
        annotation = get_args(annotation)[0]
    return _METAVARS.get(str(getattr(annotation, "__name__", annotation)).lower())


def _tidy_param(param: Any) -> None:
    label = _label(param)
    if label is None or param.metavar is not None:
        return
    # typer shows the type column from display_type_rich (an argument ignores its metavar there)
    param.display_type_rich = lambda ctx, _label=label: _label
    if getattr(param, "param_type_name", "") != "argument":
        param.metavar = label
        return
    name = str(param.name).upper()
    param.metavar = name
    # the usage line: click's PODS / [PODS] rather than typer's {pods}
    usage = (name if param.required else f"[{name}]") + ("..." if param.nargs != 1 else "")
    param.get_usage_pieces = lambda ctx, _usage=usage: [_usage]


def _tidy_help(command: Any) -> None:
    """Give every parameter without an explicit metavar a plain one (recursively), the help flag too."""
    for param in getattr(command, "params", []):
        _tidy_param(param)
    get_help_option = command.get_help_option

    def tidy_help_option(ctx: Any, _get: Any = get_help_option) -> Any:
        option = _get(ctx)
        if option is not None:
            _tidy_param(option)
        return option

    command.get_help_option = tidy_help_option
    for sub in getattr(command, "commands", {}).values():
        _tidy_help(sub)


def _one_line(e: Any) -> str:
    """A click usage error as one line: what is wrong, and where to read the usage."""
    message = " ".join(str(e.format_message()).split()).rstrip(".")
    message = message[:1].lower() + message[1:]
    ctx = getattr(e, "ctx", None)
    path = ctx.command_path if ctx is not None else "devshare"
    return f"{path}: {message} (see '{path} --help')"


class DevshareGroup(TyperGroup):
    """The ``devshare`` command group: one-line usage errors, plain placeholders in ``--help``."""

    _tidied = False

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if not self._tidied:
            _tidy_help(self)
            self._tidied = True
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _click_exc.NoArgsIsHelpError as e:  # `devshare` or `devshare agent` alone: the help
            typer.echo(e.format_message(), err=True)
            sys.exit(2)
        except _click_exc.UsageError as e:
            typer.echo(f"error: {_one_line(e)}", err=True)
            sys.exit(2)
        except _click_exc.ClickException as e:
            typer.echo(f"error: {' '.join(str(e.format_message()).split())}", err=True)
            sys.exit(e.exit_code)
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


EXIT_CODES = """Exit codes: 0 done (schedule: every pod placed); 1 schedule: some valid pods fit nowhere, or a
server stopped by an error; 2 bad input (command line, file, a pod the webhook would refuse, no cluster);
130 interrupted."""

app = typer.Typer(
    name="devshare",
    cls=DevshareGroup,
    help="Fine-grained GPU and device-sharing scheduler for Kubernetes.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"devshare {version()}")
        raise typer.Exit(0)


def version() -> str:
    """The installed distribution's version (the package's own when run from a source tree)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("devshare")
    except PackageNotFoundError:  # pragma: no cover - run from a checkout without installing
        from devshare import __version__

        return __version__


@app.callback()
def _root(
    show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                      help="Print devshare's version and exit."),
) -> None:
    """Fine-grained GPU and device-sharing scheduler for Kubernetes."""


def _register_all() -> None:
    for info in sorted(pkgutil.iter_modules(_pkg.__path__), key=lambda m: m.name):
        if info.name in ("main", "common"):
            continue
        module = importlib.import_module(f"devshare.cli.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)


_register_all()


def main() -> None:
    try:
        app(prog_name="devshare")
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
