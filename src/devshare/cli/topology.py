"""``devshare topology``: the best GPU set for a request of N GPUs on one machine."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from devshare.cli.common import user_errors
from devshare.engine.topology import best_set
from devshare.model.errors import InvalidInput
from devshare.model.links import load_topology_file


def parse_available(text: str, gpus: int) -> list[int]:
    """``"0,1,3"`` -> [0, 1, 3]; every index in range and listed once."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            idx = int(part)
        except ValueError:
            raise InvalidInput(f"{part!r} is not a GPU index: give indices like 0,1,3",
                               field="--available") from None
        if not 0 <= idx < gpus:
            raise InvalidInput(f"GPU {idx} is out of range: the machine has {gpus} GPUs (0..{gpus - 1})",
                               field="--available")
        if idx in out:
            raise InvalidInput(f"GPU {idx} is listed twice", field="--available")
        out.append(idx)
    if not out:
        raise InvalidInput("no GPU index given: give indices like 0,1,3 (or leave --available out)",
                           field="--available")
    return out


def topology(
    matrix: Path = typer.Option(
        ..., "--matrix", help="A topology JSON file: a bandwidth_gbps matrix or a links table."
    ),
    count: int = typer.Option(..., "--count", help="How many GPUs the request needs."),
    available: str | None = typer.Option(
        None, "--available", help="Comma-separated indices of the free GPUs (default: all)."
    ),
) -> None:
    """Print the free GPUs with the largest bottleneck bandwidth for COUNT GPUs, as JSON."""
    with user_errors():
        topo = load_topology_file(matrix)
        avail = parse_available(available, topo.gpus) if available is not None else list(range(topo.gpus))
        if count <= 0:
            raise InvalidInput(f"must be at least 1, got {count}", field="--count")
        if count > len(avail):
            raise InvalidInput(f"{count} GPUs asked but only {len(avail)} available", field="--count")
        result = best_set(topo.matrix, avail, count)
        assert result is not None
        out = {"gpus": list(result.gpus), "bottleneck": round(result.bottleneck, 2),
               "total": round(result.total, 2)}
        if not result.exact:
            out["exact"] = False
        typer.echo(json.dumps(out))


def register(app: typer.Typer) -> None:
    app.command("topology", short_help="The best-connected set of N GPUs.")(topology)
