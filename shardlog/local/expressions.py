"""Make moto's DynamoDB update expressions cost what they should: parse once, check once,
copy by shape.

Every lease write and every ingest commit is an UpdateItem (alone, or in a transaction)
with a handful of SET and REMOVE clauses, so the embedded AWS spends most of a write path's
time in moto's expression code. Three parts of it cost far more than their work:

- **Parsing.** moto tokenizes and parses the expression text on every request, twice per
  UpdateItem (once to report errors early, once to apply it). The text holds only
  placeholders (``#name``, ``:value``), so a writer sends the same few strings all the time.
  ``apply()`` keeps the trees of the last ``PARSED_EXPRESSIONS`` strings. moto never changes
  a parsed tree: its validator works on a copy, and the request checks only read it.
  An expression that does not parse raises every time (errors are not kept).
- **Counting sections.** moto's tree nests an ``UpdateExpression`` node per clause, and its
  check that SET, REMOVE and ADD each appear at most once walks the whole subtree of every
  one of them: quadratic in the clauses (a commit's five SET clauses made it the largest
  single cost of the request). The count of the root covers every nested node (each holds a
  subset of the root's clauses), so ``apply()`` checks the root only: the same expressions
  are refused, with moto's error naming a repeated section. (When two different sections
  both repeat, moto named the one of the innermost node, the root check names ADD, then
  REMOVE, then SET: DynamoDB's own message names one of them either way.)
- **Copying the tree.** moto's validator works on a copy of the tree (its processors
  replace nodes in place: a placeholder by the request's value, a path by the item's), made
  with ``copy.deepcopy``: generic, it memoizes and reduces every node (0.6 ms of CPU for the
  71 nodes of a Lambda consumer's checkpoint, which is sent once per batch; moto's
  UpdateItem copies its tree twice when the item does not exist yet).
  ``apply()`` gives the validator ``copy_tree`` (0.17 ms for that tree), which copies the
  same nodes by their known shape: a new node of the same class per node, its attributes
  copied, its children list new, its parent the copy of its parent; the leaves (names,
  placeholders, operators, indexes: strings, numbers, booleans) shared, as they never
  change. Anything else (a value moto's ``list_append`` copies, a node whose parent lies
  outside the tree) goes to ``copy.deepcopy`` as before, so the copy is the one moto made.
  Each of the validator's passes also asked, at every node, which node classes it
  processes, building its map of them anew each time (a twentieth of an UpdateItem's CPU):
  the classes are a pass's own, the same for every instance, so ``apply()`` keeps them per
  pass class (``node_classes``).

Behaviour is unchanged: tests/functional/local/test_expressions.py sends the same requests
with and without this module's help over HTTP, and tests/unit/test_expression_copy.py holds
``copy_tree``'s copies to ``copy.deepcopy``'s, node for node.
"""

from __future__ import annotations

import copy
import functools
import threading
from typing import Any

from moto.dynamodb.parsing import expressions as moto_expressions
from moto.dynamodb.parsing import validators as moto_validators
from moto.dynamodb.parsing.ast_nodes import (  # type: ignore[attr-defined]
    Node,
    UpdateExpression,
)

PARSED_EXPRESSIONS = 1024

_apply_lock = threading.Lock()
_applied = False
_PARSER: Any = moto_expressions.UpdateExpressionParser  # type: ignore[attr-defined]
_parse = _PARSER.make.__func__


@functools.lru_cache(maxsize=PARSED_EXPRESSIONS)
def parsed(parser: type, expression: str) -> Any:
    """moto's tree of ``expression``, parsed once per distinct string."""
    return _parse(parser, expression)


def _count_sections_at_root(self: Any, node: Any) -> Any:
    """``ActionCountValidator.traverse``: the root's count holds every nested node's."""
    if isinstance(node, UpdateExpression):
        self.verify_action_counts(node)
    return node


# Leaves a copy may share: immutable.
_SHARED_LEAVES = frozenset({str, int, float, bool, type(None)})
_NODE_ATTRIBUTES = frozenset({"type", "children", "parent"})  # every moto node's, and only


class _OutsideTree(Exception):
    """A node's parent is not in the tree being copied: deepcopy copies it too."""


def copy_tree(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """``copy.deepcopy(value)`` for moto's expression trees, by their shape (the module
    docstring); any other value, or a tree of another shape, by ``copy.deepcopy``."""
    if not isinstance(value, Node) or memo is not None:
        return copy.deepcopy(value, memo)
    try:
        return _copy_node(value, {})
    except _OutsideTree:
        return copy.deepcopy(value)


def _copy_node(node: Any, copies: dict[int, Any]) -> Any:
    state = node.__dict__
    if state.keys() != _NODE_ATTRIBUTES:
        raise _OutsideTree(sorted(state))  # attributes of unknown shape: copy it all
    new = object.__new__(node.__class__)
    copies[id(node)] = new
    children = state["children"]
    if children is not None:
        children = [
            c if c.__class__ in _SHARED_LEAVES else _copy_child(c, copies) for c in children
        ]
    parent = state["parent"]
    if parent is not None:
        if id(parent) not in copies:  # a root with a parent, or a node moved by normalize()
            raise _OutsideTree("parent")
        parent = copies[id(parent)]
    new.__dict__ = {"type": state["type"], "children": children, "parent": parent}
    return new


def _copy_child(child: Any, copies: dict[int, Any]) -> Any:
    if not isinstance(child, Node):
        raise _OutsideTree(type(child).__name__)  # a value (a DynamoType): copy it all
    if id(child) in copies:  # one node twice in the tree: one copy, as deepcopy's memo
        return copies[id(child)]
    return _copy_node(child, copies)


_NODE_CLASSES: dict[type, tuple[type, ...]] = {}
_nodes_to_be_processed = moto_validators.DepthFirstTraverser.nodes_to_be_processed


def node_classes(self: Any) -> tuple[type, ...]:
    """``DepthFirstTraverser.nodes_to_be_processed``, computed once per pass class: the keys
    of every pass's processing map are classes named in its code, not its state."""
    found = _NODE_CLASSES.get(type(self))
    if found is None:
        found = _NODE_CLASSES.setdefault(type(self), tuple(_nodes_to_be_processed(self)))
    return found


def apply() -> None:
    """Install them all (idempotent)."""
    global _applied
    with _apply_lock:
        if _applied:
            return
        _PARSER.make = classmethod(parsed)  # type: ignore[arg-type]
        moto_validators.ActionCountValidator.traverse = _count_sections_at_root  # type: ignore[method-assign]
        moto_validators.deepcopy = copy_tree  # type: ignore[assignment]
        moto_validators.DepthFirstTraverser.nodes_to_be_processed = node_classes
        _applied = True
