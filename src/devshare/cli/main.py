"""Entry point: ``devshare <command>``.

Every module of this package other than this one defines ``register(app: typer.Typer)`` and adds
its command(s); they are found here, so a new command is one new module.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

import devshare.cli as _pkg

app = typer.Typer(
    name="devshare",
    help="Fine-grained GPU and device-sharing scheduler for Kubernetes.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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
        app()
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
