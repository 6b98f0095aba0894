"""The layer rule of DESIGN.md, enforced: each layer of ``src/devshare`` imports only the layers below it

    model < engine < kube < server, agent, sim (side by side, none imports another) < cli

except that kube imports nothing of the engine either (it talks to the API server; what the objects
mean is the engine's: issue 35), and the pure layers (model, engine) import no I/O library. Every
import counts: module level, inside functions, under ``TYPE_CHECKING``, relative or absolute."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "devshare"
RANK = {"model": 0, "engine": 1, "kube": 2, "server": 3, "agent": 3, "sim": 3, "cli": 4}
APART = {"kube": {"engine"}}  # layers a layer may not import although they are below it
# the standard library's and the pure dependencies' modules the pure layers may use
PURE_ALLOWED = {"__future__", "abc", "collections", "contextlib", "dataclasses", "enum", "fractions", "functools",
                "heapq", "itertools", "json", "logging", "math", "operator", "random", "re", "typing", "bisect",
                "devshare", "msgspec", "numpy", "pathlib", "hashlib", "difflib", "fnmatch",
                "highspy",  # HiGHS: an LP solver, pure computation like numpy (its banner: sim/solver.py)
                # DRA's CEL selectors: Google's CEL runtime and the message types it takes (engine/dra/cel.py)
                "cel_expr_python", "google"}


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``."""
    rel = path.relative_to(SRC.parent).with_suffix("").parts  # ("devshare", "engine", "fit")
    package = rel[:-1]  # a module's package; for __init__.py the package itself
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            out.append((node.lineno, name))
            out += [(node.lineno, f"{name}.{a.name}") for a in node.names]  # ``from pkg import module``
    return out


def layer_of(path: Path) -> str | None:
    parts = path.relative_to(SRC).parts
    return parts[0] if len(parts) > 1 and parts[0] in RANK else None


def violations() -> list[str]:
    bad: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        layer = layer_of(path)
        if layer is None:
            continue
        for line, name in imports(path):
            parts = name.split(".")
            where = f"{path.relative_to(SRC.parent)}:{line}"
            if parts[0] == "devshare" and len(parts) > 1 and parts[1] in RANK and parts[1] != layer:
                if RANK[parts[1]] >= RANK[layer]:
                    bad.append(f"{where}: {layer} imports {name} ({parts[1]} is not below {layer})")
                elif parts[1] in APART.get(layer, ()):
                    bad.append(f"{where}: {layer} imports {name} ({layer} imports nothing of {parts[1]})")
            elif RANK[layer] <= RANK["engine"] and parts[0] not in PURE_ALLOWED:
                bad.append(f"{where}: {layer} is pure but imports {name}")
    return bad


def test_no_module_imports_from_its_own_layer_or_above() -> None:
    assert violations() == []


@pytest.mark.parametrize(("layer", "module", "expect"), [
    ("engine", "from devshare.kube.backend import Backend", "engine imports devshare.kube.backend"),
    ("server", "import devshare.sim.replay", "server imports devshare.sim.replay"),
    ("model", "from ..engine import state", "model imports devshare.engine"),
    ("engine", "import aiohttp", "engine is pure but imports aiohttp"),
    ("kube", "from devshare.engine.state import ClusterState", "kube imports nothing of engine"),
])
def test_the_check_sees_an_upward_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layer: str, module: str,
                                         expect: str) -> None:
    fake = tmp_path / "devshare"
    (fake / layer).mkdir(parents=True)
    (fake / layer / "bad.py").write_text(module + "\n")
    monkeypatch.setattr(f"{__name__}.SRC", fake)
    found = violations()
    assert any(expect in f for f in found), found


def import_cycles() -> list[list[str]]:
    """Groups of modules of ``src/devshare`` that import each other in a circle (every import counts,
    lazy ones too: a lazy import is how a circle hides)."""
    modules: dict[str, Path] = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for _, imported in imports(path):
            parts = imported.split(".")
            target = next((".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in modules),
                          None)
            if target is not None and target != name and not name.startswith(target + "."):
                deps.add(target)  # a module's own package (its __init__) does not count
        graph[name] = deps
    # strongly connected components (iterative Tarjan)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on_stack.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycles() -> None:
    assert import_cycles() == []


def test_the_cycle_check_sees_a_lazy_circle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "devshare" / "model"
    fake.mkdir(parents=True)
    (fake / "a.py").write_text("from devshare.model import b\n")
    (fake / "b.py").write_text("def f():\n    from devshare.model.a import x\n")
    monkeypatch.setattr(f"{__name__}.SRC", tmp_path / "devshare")
    assert import_cycles() == [["devshare.model.a", "devshare.model.b"]]
