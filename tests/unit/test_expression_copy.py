"""The embedded DynamoDB's validator copies an update expression's tree by its shape
(shardlog/local/expressions.py, ``copy_tree``): the copy is the one ``copy.deepcopy`` makes,
node for node, and shares no node with the kept tree. Over HTTP,
tests/functional/local/test_expressions.py sends the same requests through it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.parsing import validators as moto_validators
from moto.dynamodb.parsing.ast_nodes import Node  # type: ignore[attr-defined]
from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]

from shardlog.dal.consumers import LaneProgress, RetryState
from shardlog.lease import LeaseManager
from shardlog.local import expressions
from shardlog.tables import Lease


def _lease() -> Lease:
    return Lease("g", "shardId-000000000000", owner="lambda:r-1", counter=7, expires_at_ms=9)


def _shardlog_updates() -> list[str]:
    """Update expressions as shardlog renders them: the Lambda consumer's checkpoint with
    a retry state, the ingest checkpoint with release, a renewal, a release."""
    leases = LeaseManager(None, "consumers")  # type: ignore[arg-type]  # renders, sends nothing
    lease = _lease()
    retrying = LaneProgress(1, {0: RetryState(start=100, end=200, size=50, attempts=2)}, {})
    clauses = retrying.clauses()
    checkpoint = leases.checkpoint_update(lease, "100", now_ms=1).extended(
        sets=clauses.sets, removes=clauses.removes, values=clauses.values
    )
    return [
        str(update.request()["UpdateExpression"])
        for update in (
            checkpoint,
            leases.checkpoint_update(
                lease, "49590338271490256608559692538361571095921575989136588898", 3, release=True
            ),
            leases.renew_update(lease),
        )
    ]


EXPRESSIONS = [
    "SET a = :v",
    "SET a = if_not_exists(a, :zero) + :one, b = :v REMOVE c, d",
    "SET #n = :v, l = list_append(if_not_exists(l, :empty), :items)",
    "SET m.inner.deep = :v, l[2] = :v, x = y - :one",
    "ADD counter :one, tags :set",
    "DELETE tags :set",
    "REMOVE a.b[0], c",
    "SET a = :v REMOVE b ADD c :one DELETE d :set",
    *_shardlog_updates(),
]


def _same(ours: Any, theirs: Any, pairs: dict[int, int]) -> None:
    """Two copies alike: same classes, attributes and leaves; parents the counterparts."""
    if not isinstance(theirs, Node):
        assert type(ours) is type(theirs) and ours == theirs
        return
    assert type(ours) is type(theirs)
    assert ours.__dict__.keys() == theirs.__dict__.keys()
    pairs[id(ours)] = id(theirs)
    for name, value in theirs.__dict__.items():
        if name == "children":
            if value is None:
                assert ours.children is None
                continue
            assert len(ours.children) == len(value)
            for mine, other in zip(ours.children, value, strict=True):
                _same(mine, other, pairs)
        elif name != "parent":
            assert ours.__dict__[name] == value


def _parents(ours: Any, theirs: Any, pairs: dict[int, int]) -> None:
    if not isinstance(ours, Node):
        return
    if theirs.parent is None:
        assert ours.parent is None
    else:
        assert pairs[id(ours.parent)] == id(theirs.parent)
    for mine, other in zip(ours.children or [], theirs.children or [], strict=True):
        _parents(mine, other, pairs)


def _refused(*_args: Any) -> Any:
    raise AssertionError("copied by copy.deepcopy, not by its shape")


def _nodes(tree: Any) -> list[Any]:
    if not isinstance(tree, Node):
        return []
    return [tree, *(n for child in tree.children or [] for n in _nodes(child))]


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_the_copy_is_deepcopys_node_for_node_and_shares_no_node(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = expressions.parsed(UpdateExpressionParser, text)
    theirs = copy.deepcopy(tree)
    monkeypatch.setattr(copy, "deepcopy", _refused)  # the parsed trees never need it
    ours = expressions.copy_tree(tree)
    monkeypatch.undo()
    pairs: dict[int, int] = {}
    _same(ours, theirs, pairs)
    _parents(ours, theirs, pairs)
    kept = {id(n) for n in _nodes(tree)}
    assert kept.isdisjoint(id(n) for n in _nodes(ours))
    assert len(_nodes(ours)) == len(_nodes(tree)) > 1


def test_a_processor_changing_the_copy_leaves_the_kept_tree_as_parsed() -> None:
    """What the validator does to its copy: replace a child in place."""
    text = "SET a = :v, b = :w"
    tree = expressions.parsed(UpdateExpressionParser, text)
    before = copy.deepcopy(tree)
    ours = expressions.copy_tree(tree)
    for node in _nodes(ours):
        if node.children:
            node.children[0] = "changed"
    _same(tree, before, {})


def test_values_and_trees_of_another_shape_go_to_deepcopy() -> None:
    value = DynamoType({"L": [{"S": "a"}]})
    copied = expressions.copy_tree(value)
    assert copied == value and copied is not value and copied.value is not value.value
    # normalize() hoists clauses out of their containers: their parents lie outside the tree
    tree = copy.deepcopy(expressions.parsed(UpdateExpressionParser, "SET a = :v REMOVE b"))
    tree.normalize()
    in_tree = {id(n) for n in _nodes(tree)}
    hoisted = [n for n in _nodes(tree) if n.parent is not None and id(n.parent) not in in_tree]
    assert hoisted  # the case: a node whose parent does not hold it
    pairs: dict[int, int] = {}
    ours, theirs = expressions.copy_tree(tree), copy.deepcopy(tree)
    _same(ours, theirs, pairs)
    assert {id(n) for n in _nodes(tree)}.isdisjoint(id(n) for n in _nodes(ours))


def _passes(cls: type) -> list[type]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_passes(sub))]


def test_each_validator_pass_processes_the_classes_moto_names() -> None:
    """The node classes kept per pass class are the keys of its processing map, for every
    pass of moto's validator and any instance of it."""
    expressions.apply()
    traverser = moto_validators.DepthFirstTraverser
    assert traverser.nodes_to_be_processed is expressions.node_classes
    checked = 0
    for cls in _passes(traverser):
        first, second = object.__new__(cls), object.__new__(cls)
        try:
            named = tuple(first._processing_map().keys())
        except (AttributeError, TypeError):  # a pass with a traversal of its own
            continue
        assert expressions.node_classes(first) == named == expressions.node_classes(second)
        checked += 1
    assert checked >= 8
