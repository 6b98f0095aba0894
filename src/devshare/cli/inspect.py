"""``devshare inspect``: per node, per device, what is used and by whom."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from devshare.cli.common import ContextOption, KubeconfigOption, emit, fail, load_cluster, user_errors
from devshare.kube.backend import Backend
from devshare.model.quantity import human_bytes


def _cell(used: dict[str, Any], total: dict[str, Any], key: str, fmt: Any) -> str:
    if key not in total:
        return "-"
    return f"{fmt(used.get(key, 0))} / {fmt(total[key])}"


def _table(data: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_lines=False)
    for col in ("node", "device", "id", "health", "compute", "memory", "pods"):
        table.add_column(col)
    for n in data["nodes"]:
        if not n["devices"]:
            table.add_row(n["name"], "-", "", "", "", "", "")
        for i, d in enumerate(n["devices"]):
            health = "ok" if d["health"] else "UNHEALTHY"
            if d.get("heldOutside"):
                health += " (held outside)"
            table.add_row(
                n["name"] if i == 0 else "",
                f"{d['type']} {d['minor']}",
                d["id"],
                health,
                _cell(d["used"], d["total"], "core", lambda v: f"{v:g}%"),
                _cell(d["used"], d["total"], "memory", human_bytes),
                ", ".join(d["pods"]),
            )
    Console().print(table)


def inspect(
    cluster: Annotated[
        Path | None, typer.Option(help="Multi-document YAML of Node, Device and Pod objects.")
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    output: Annotated[str, typer.Option("--output", "-o", help="json, yaml or table.")] = "table",
) -> None:
    """Per node, per device: total, used, and the pods (ns/name/container) using it."""
    with user_errors():
        if cluster is not None and kubeconfig is not None:
            raise fail("give either --cluster FILE or --kubeconfig PATH, not both")
        if output not in ("json", "yaml", "table"):
            raise fail(f"unknown output format {output!r}: use json, yaml or table")
        backend: Backend
        if cluster is not None:
            backend = load_cluster(cluster)
        else:
            from devshare.kube.live import LiveBackend

            backend = LiveBackend.connect(kubeconfig, context=context)
        from devshare.kube.snapshot import load_state

        state = asyncio.run(load_state(backend))
        emit(state.inspect(), output, _table)


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect)
