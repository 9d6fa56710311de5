"""Every import runs downhill: the import graph of shardlog/, lambdas/, infra/, spark_jobs/,
bench/ and scripts/, read from the source (an AST walk, nothing imported), has no cycle and
no arrow against the layers.

The layers, from the bottom: the library (``shardlog``, minus its local runtime and CLI);
the handlers (``lambdas``), the Spark jobs (``spark_jobs``) and the CDK app (``infra``), each
built on the library only; the local runtime (``shardlog.local``), the one part of the
package that drives the handlers in-process; the CLI (``shardlog.cli``), which starts the
local runtime; benchmarks and scripts on top. Only the CLI, tests and benchmarks (and
scripts) import the local runtime.

Every import counts: at module level, inside a function, under ``TYPE_CHECKING``, and
``importlib.import_module("...")`` / ``__import__("...")`` with a literal name. The cycle
check follows the imports that run (``TYPE_CHECKING`` blocks are annotations only, which is
what they are for); the layer check follows them all.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("shardlog", "lambdas", "infra", "spark_jobs", "bench", "scripts")
LIBRARY = "shardlog"
LOCAL = "shardlog.local"
CLI = "shardlog.cli"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (the longest prefix that is a module of the repository)
    path: Path
    line: int
    typing_only: bool

    def __str__(self) -> str:
        where = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{where}:{self.line}: {self.source} imports {self.target}"


def modules(root: Path = ROOT) -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _typing_blocks(tree: ast.AST) -> set[int]:
    """Line numbers inside ``if TYPE_CHECKING:`` blocks."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for child in node.body:
                    lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imported_names(node: ast.AST, package: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            base = ".".join([*parts, base] if base else parts)
        yield base
        yield from (f"{base}.{alias.name}" for alias in node.names)
    elif isinstance(node, ast.Call):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        first = node.args[0] if node.args else None
        literal = first.value if isinstance(first, ast.Constant) else None
        if called in ("import_module", "__import__") and isinstance(literal, str):
            yield literal


def imports(known: dict[str, Path]) -> list[Import]:
    found = []
    for source, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        typing_lines = _typing_blocks(tree)
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node in ast.walk(tree):
            targets = set()
            for name in _imported_names(node, package):
                while name and name not in known:
                    name = name.rpartition(".")[0]
                if name and name != source:
                    targets.add(name)
            line = getattr(node, "lineno", 0)
            found += [
                Import(source, target, path, line, line in typing_lines) for target in targets
            ]
    return found


def layer_violation(edge: Import) -> str | None:
    """Why ``edge`` runs uphill, or None when it is allowed."""
    source, target = edge.source, edge.target
    if _within(target, LOCAL) and not (
        _within(source, LOCAL) or _within(source, CLI) or source.startswith(("bench", "scripts"))
    ):
        return "only the CLI, tests, benchmarks and scripts import the local runtime"
    if _within(target, CLI) and not (_within(source, CLI) or source == "shardlog.__main__"):
        return "nothing below the CLI imports it"
    for top in ("bench", "scripts"):
        if _within(target, top) and not _within(source, top):
            return f"nothing imports {top}/ but {top}/ itself"
    if _within(target, "infra") and not _within(source, "infra"):
        return "nothing imports the CDK app"
    if _within(target, "lambdas"):
        if _within(source, "lambdas") or _within(source, LOCAL):
            return None
        if source.startswith(("bench", "scripts")):
            return None
        return "only the local runtime (and benchmarks) drive the handlers"
    if _within(target, "spark_jobs") and not (
        _within(source, "spark_jobs") or _within(source, LOCAL) or source.startswith("bench")
    ):
        return "only the local runtime (local EMR) and benchmarks run the Spark jobs"
    return None


def cycles(edges: list[Import]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), runtime imports only."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        if not edge.typing_only:
            graph.setdefault(edge.source, set()).add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def edges() -> list[Import]:
    return imports(modules())


def test_every_import_runs_downhill(edges: list[Import]) -> None:
    uphill = [f"{edge}: {why}" for edge in edges if (why := layer_violation(edge))]
    assert not uphill, "imports against the layers:\n" + "\n".join(sorted(uphill))


def test_the_import_graph_has_no_cycle(edges: list[Import]) -> None:
    found = cycles(edges)
    where = [
        "\n".join(str(e) for e in edges if e.source in c and e.target in c and not e.typing_only)
        for c in found
    ]
    assert not found, "import cycles:\n" + "\n\n".join(where)


def test_the_walk_sees_every_kind_of_import(tmp_path: Path) -> None:
    """The walk itself can fail: each way of writing an uphill import is found."""
    package = tmp_path / "shardlog"
    (package / "local").mkdir(parents=True)
    (tmp_path / "lambdas").mkdir()
    for init in (package, package / "local", tmp_path / "lambdas"):
        (init / "__init__.py").write_text("")
    (tmp_path / "lambdas" / "handler.py").write_text("")
    (package / "local" / "runtime.py").write_text("from lambdas import handler\n")
    (package / "a.py").write_text(
        "import importlib\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from shardlog.local import runtime\n"
        "def f():\n    from . import b\n    return importlib.import_module('lambdas.handler')\n"
    )
    (package / "b.py").write_text("import shardlog.a\n")
    found = imports(modules(tmp_path))
    uphill = {(e.source, e.target) for e in found if layer_violation(e)}
    assert uphill == {
        ("shardlog.a", "shardlog.local"),
        ("shardlog.a", "shardlog.local.runtime"),
        ("shardlog.a", "lambdas.handler"),
    }
    assert cycles(found) == [["shardlog.a", "shardlog.b"]]
