"""``devshare config``: print the default configuration file, or check one."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from devshare.cli.common import user_errors

config_app = typer.Typer(help="The configuration file (DevshareConfiguration): print the defaults, check a file.",
                         add_completion=False, no_args_is_help=True)


@config_app.command("defaults")
def defaults() -> None:
    """Print a configuration file with every field at its default value."""
    from devshare.config import Configuration

    typer.echo(Configuration().to_yaml(), nl=False)


@config_app.command("check")
def check(file: Annotated[Path, typer.Argument(help="The DevshareConfiguration YAML to check.")]) -> None:
    """Check a configuration file: prints it with every default filled in, or one error line."""
    from devshare.config import load_config

    with user_errors():
        cfg = load_config(file)
    typer.echo(cfg.to_yaml(), nl=False)


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config", short_help="Print the default configuration, check a file.")
