"""Reading openb traces (``shared/traces/openb``): node and pod CSVs into plain records.

Node CSV: ``sn,cpu_milli,memory_mib,gpu,model``. Pod CSV: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli``
then optionally ``gpu_spec`` (allowed models separated by ``|``) and columns the replay ignores.
Every bad line raises :class:`InvalidInput` naming the file and the line.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from devshare.model.errors import InvalidInput

MILLI = 1000  # milli-GPU of one card
MIB = 1 << 20

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


@dataclass(frozen=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU, 1..1000 when num_gpu > 0
    gpu_spec: tuple[str, ...] = ()  # allowed GPU models; empty = any

    @property
    def gpu_total(self) -> int:
        """Milli-GPU the pod asks in all."""
        return self.num_gpu * self.gpu_milli


@dataclass(frozen=True)
class Trace:
    name: str  # e.g. openb_pod_list_default
    nodes: tuple[TraceNode, ...]
    pods: tuple[TracePod, ...]

    @property
    def gpu_capacity(self) -> int:
        return sum(n.gpus for n in self.nodes) * MILLI


def _rows(path: Path, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInput(f"not a UTF-8 text file ({e.reason})", field=str(path)) from None
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise InvalidInput(f"empty file; expected a CSV header {','.join(required)}", field=str(path))
    reader = csv.reader(lines)
    header = [h.strip() for h in next(reader)]
    missing = [c for c in required if c not in header]
    if missing:
        raise InvalidInput(
            f"line 1: header lacks column(s) {', '.join(missing)}; expected {','.join(required)},...",
            field=str(path))
    out: list[tuple[int, dict[str, str]]] = []
    for lineno, fields in enumerate(reader, start=2):
        if not fields or all(not f.strip() for f in fields):
            continue
        if len(fields) < len(header):
            raise InvalidInput(f"line {lineno}: {len(fields)} field(s), the header has {len(header)} "
                               "(truncated line?)", field=str(path))
        if len(fields) > len(header):
            raise InvalidInput(f"line {lineno}: {len(fields)} fields, the header has {len(header)}",
                               field=str(path))
        out.append((lineno, {h: f.strip() for h, f in zip(header, fields, strict=True)}))
    if not out:
        raise InvalidInput("no data lines after the header", field=str(path))
    return out


def _int(row: dict[str, str], col: str, path: Path, lineno: int, *, lo: int = 0, hi: int | None = None) -> int:
    raw = row[col]
    try:
        v = int(raw)
    except ValueError:
        raise InvalidInput(f"line {lineno}: {col} must be an integer, got {raw!r}", field=str(path)) from None
    if v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"between {lo} and {hi}"
        raise InvalidInput(f"line {lineno}: {col} must be {rng}, got {v}", field=str(path))
    return v


def _unique_name(row: dict[str, str], col: str, what: str, seen: set[str], path: Path, lineno: int) -> str:
    """The row's name in ``col``: not empty, not seen on an earlier line."""
    name = row[col]
    if not name:
        raise InvalidInput(f"line {lineno}: {col} (the {what} name) is empty", field=str(path))
    if name in seen:
        raise InvalidInput(f"line {lineno}: {what} {name} is listed twice", field=str(path))
    seen.add(name)
    return name


def load_nodes(path: Path) -> tuple[TraceNode, ...]:
    nodes: list[TraceNode] = []
    seen: set[str] = set()
    for lineno, row in _rows(path, NODE_COLUMNS):
        name = _unique_name(row, "sn", "node", seen, path, lineno)
        gpus = _int(row, "gpu", path, lineno, hi=64)
        model = row["model"]
        if gpus and not model:
            raise InvalidInput(f"line {lineno}: node {name} has {gpus} GPU(s) but no model", field=str(path))
        nodes.append(TraceNode(name, _int(row, "cpu_milli", path, lineno),
                               _int(row, "memory_mib", path, lineno), gpus, model))
    return tuple(nodes)


def load_pods(path: Path, models: set[str] | None = None) -> tuple[TracePod, ...]:
    """Pods of a trace. ``models``: the GPU models of the cluster; a ``gpu_spec`` naming none of
    them is an error (such a pod could never be placed)."""
    pods: list[TracePod] = []
    seen: set[str] = set()
    for lineno, row in _rows(path, POD_COLUMNS):
        name = _unique_name(row, "name", "pod", seen, path, lineno)
        num_gpu = _int(row, "num_gpu", path, lineno, hi=64)
        gpu_milli = _int(row, "gpu_milli", path, lineno, hi=MILLI)
        if num_gpu == 0 and gpu_milli:
            raise InvalidInput(f"line {lineno}: gpu_milli is {gpu_milli} but num_gpu is 0", field=str(path))
        if num_gpu and not gpu_milli:
            raise InvalidInput(f"line {lineno}: num_gpu is {num_gpu} but gpu_milli is 0", field=str(path))
        if num_gpu > 1 and gpu_milli < MILLI:
            raise InvalidInput(f"line {lineno}: a share below one GPU ({gpu_milli} milli) is only "
                               f"possible on a single GPU, num_gpu is {num_gpu}", field=str(path))
        spec_raw = row.get("gpu_spec", "")
        spec = tuple(sorted({s.strip() for s in spec_raw.split("|") if s.strip()}))
        if spec and models is not None:
            unknown = [s for s in spec if s not in models]
            if unknown:
                raise InvalidInput(
                    f"line {lineno}: gpu_spec names unknown GPU model(s) {', '.join(unknown)}; "
                    f"the cluster has {', '.join(sorted(models)) or 'none'}", field=str(path))
        pods.append(TracePod(name, _int(row, "cpu_milli", path, lineno), _int(row, "memory_mib", path, lineno),
                             num_gpu, gpu_milli, spec))
    return tuple(pods)


def load_trace(nodes_csv: Path, pods_csv: Path) -> Trace:
    nodes = load_nodes(nodes_csv)
    models = {n.model for n in nodes if n.gpus}
    pods = load_pods(pods_csv, models)
    if not any(n.gpus for n in nodes):
        raise InvalidInput("no node has a GPU; the replay measures GPU allocation", field=str(nodes_csv))
    return Trace(Path(pods_csv).stem, nodes, pods)
