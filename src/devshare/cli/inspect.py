"""``devshare inspect``: per node, per device, what is used and by whom."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer

from devshare.cli.common import (
    ContextOption,
    KubeconfigOption,
    connect_live,
    emit,
    fail,
    load_cluster,
    table_console,
    user_errors,
)
from devshare.kube.backend import Backend
from devshare.model.quantity import human_bytes


def _cell(used: dict[str, Any], total: dict[str, Any], key: str, fmt: Any) -> str:
    """``used/total`` with the unit once when both share it: ``50/100%``, ``7.5/15 GiB``."""
    if key not in total:
        return "-"
    u, t = fmt(used.get(key, 0)), fmt(total[key])
    u_num, _, u_unit = u.partition(" ")
    t_unit = t.partition(" ")[2]
    if u.endswith("%") and t.endswith("%"):
        return f"{u[:-1]}/{t}"
    return f"{u_num}/{t}" if u_unit == t_unit or u_num == "0" else f"{u}/{t}"


def _table(data: dict[str, Any]) -> None:
    """One row per device. Short values never wrap and names fold rather than being cut with "…", so an
    80-column terminal still shows whole node and pod names; device ids are in ``-o json`` / ``-o yaml``."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for col in ("node", "device", "health", "compute", "memory", "pods"):
        short = col in ("device", "health", "compute", "memory")
        table.add_column(col, overflow="fold", no_wrap=short)
    for n in data["nodes"]:
        if not n["devices"]:
            table.add_row(n["name"], "-", "", "", "", "")
        for i, d in enumerate(n["devices"]):
            health = "ok" if d["health"] else "UNHEALTHY"
            if d.get("heldOutside"):
                health += " (held outside)"
            table.add_row(
                n["name"] if i == 0 else "",
                f"{d['type']} {d['minor']}",
                health,
                _cell(d["used"], d["total"], "core", lambda v: f"{v:g}%"),
                _cell(d["used"], d["total"], "memory", human_bytes),
                "\n".join(d["pods"]),
            )
    table_console().print(table)


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
        backend = load_cluster(cluster) if cluster is not None else connect_live(kubeconfig, context=context)
        from devshare.cli.snapshot import load_state

        state = asyncio.run(load_state(backend))
        emit(state.inspect(), output, _table)


def register(app: typer.Typer) -> None:
    app.command("inspect", short_help="Per node and device: what is used, by whom.")(inspect)
