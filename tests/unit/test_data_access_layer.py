"""Only the data-access layer builds DynamoDB requests (shardlog/dal/__init__.py).

The check walks the syntax of every module outside the layer: a name or attribute that
sends a request (``update_item``, ``transact_write_items``, a DynamoDB client's
``put_item``...), or a string that is a request's part (``UpdateExpression``,
``ConditionExpression``, the transaction operations' names), is a request built outside
it. Docstrings and comments may name operations (they explain the protocol); code may
not. The embedded AWS (shardlog/local/) closes moto's gaps with requests of its own, and
the tests build theirs on purpose: both are outside the rule.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import REPO_ROOT

SCANNED = ("shardlog", "lambdas", "infra", "bench", "scripts", "spark_jobs")
LAYER = ("shardlog/tables.py", "shardlog/lease.py", "shardlog/dal/")
OUTSIDE_THE_RULE = ("shardlog/local/",)
KEPT: set[tuple[str, str]] = set()  # (path, name) allowed outside the layer: none

# Names that send a DynamoDB request (the client's methods that read or write items).
REQUEST_NAMES = {
    "update_item",
    "put_item",
    "get_item",
    "delete_item",
    "transact_write_items",
    "transact_get_items",
    "batch_write_item",
    "batch_get_item",
}
# Strings that are parts of a request (its parameters, or its operation by name).
REQUEST_WORDS = (
    "UpdateExpression",
    "ConditionExpression",  # also KeyConditionExpression
    "TransactWriteItems",
    "TransactGetItems",
)
# Benchmarks time the SDK itself on one item: bench/speed.py's GetItem is not a request
# shardlog makes.
SDK_TIMING = {("bench/speed.py", "get_item"), ("bench/speed.py", "put_item")}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def requests_in(source: str) -> list[tuple[int, str]]:
    """(line, what) for every request name or request word in ``source``'s code."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    hits: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.alias):
            names = [node.name.rsplit(".", 1)[-1], *([node.asname] if node.asname else [])]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names = [node.name]
        elif isinstance(node, ast.keyword) and node.arg:
            names = [node.arg]
        line = getattr(node, "lineno", 0)
        hits += [(line, name) for name in names if name in REQUEST_NAMES]
        hits += [(line, w) for name in names for w in REQUEST_WORDS if w in name]
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
        ):
            hits += [(node.lineno, w) for w in REQUEST_WORDS if w in node.value]
    return sorted(set(hits))


def _scanned_files() -> list[Path]:
    files = [p for d in SCANNED for p in (REPO_ROOT / d).rglob("*.py")]
    return sorted([*files, REPO_ROOT / "app.py"])


def _relative(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


def test_only_the_layer_builds_dynamodb_requests() -> None:
    found = []
    for path in _scanned_files():
        relative = _relative(path)
        if relative.startswith(LAYER + OUTSIDE_THE_RULE):
            continue
        for line, what in requests_in(path.read_text()):
            if (relative, what) not in KEPT | SDK_TIMING:
                found.append(f"{relative}:{line}: {what}")
    assert found == [], "DynamoDB requests outside the data-access layer:\n" + "\n".join(found)


def test_the_layer_is_where_the_requests_are() -> None:
    """The check looks at real code: the layer's own modules are full of what it forbids."""
    in_layer = {
        _relative(p): requests_in(p.read_text())
        for p in _scanned_files()
        if _relative(p).startswith(LAYER)
    }
    assert all(in_layer[m] for m in ("shardlog/tables.py", "shardlog/lease.py"))
    assert {what for _, what in in_layer["shardlog/dal/partitions.py"]} >= {
        "transact_write_items",
        "transact_get_items",
        "update_item",
        "UpdateExpression",
    }


@pytest.mark.parametrize(
    "code",
    [
        "clients.dynamodb.update_item(TableName='t', Key={})",
        "from shardlog.tables import update_item",
        "import shardlog.tables.update_item as send",
        "client.transact_write_items(TransactItems=[])",
        "request = {'UpdateExpression': 'SET a = :a'}",
        "op = 'TransactGetItems'",
        "kwargs = dict(ConditionExpression='attribute_not_exists(k)')",
        "ddb.put_item(TableName='t', Item={})",
    ],
)
def test_a_request_built_in_code_is_found(code: str) -> None:
    assert requests_in(code) != []


def test_docstrings_and_comments_may_name_operations() -> None:
    code = '"""Commits in one TransactWriteItems."""\n# an UpdateExpression here\nx = 1\n'
    assert requests_in(code) == []
