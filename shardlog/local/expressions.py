"""Make moto's DynamoDB update expressions cost what they should: parse once, check once.

Every lease write and every ingest commit is an UpdateItem (alone, or in a transaction)
with a handful of SET and REMOVE clauses, so the embedded AWS spends most of a write path's
time in moto's expression code. Two parts of it cost far more than their work:

- **Parsing.** moto tokenizes and parses the expression text on every request, twice per
  UpdateItem (once to report errors early, once to apply it). The text holds only
  placeholders (``#name``, ``:value``), so a writer sends the same few strings all the time.
  ``apply()`` keeps the trees of the last ``PARSED_EXPRESSIONS`` strings. moto never changes
  a parsed tree: its validator works on a deep copy, and the request checks only read it.
  An expression that does not parse raises every time (errors are not kept).
- **Counting sections.** moto's tree nests an ``UpdateExpression`` node per clause, and its
  check that SET, REMOVE and ADD each appear at most once walks the whole subtree of every
  one of them: quadratic in the clauses (a commit's five SET clauses made it the largest
  single cost of the request). The count of the root covers every nested node (each holds a
  subset of the root's clauses), so ``apply()`` checks the root only: the same expressions
  are refused, with moto's error naming a repeated section. (When two different sections
  both repeat, moto named the one of the innermost node, the root check names ADD, then
  REMOVE, then SET: DynamoDB's own message names one of them either way.)

Behaviour is unchanged: tests/functional/local/test_expressions.py sends the same requests
with and without this module's help over HTTP.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from moto.dynamodb.parsing import expressions as moto_expressions
from moto.dynamodb.parsing import validators as moto_validators
from moto.dynamodb.parsing.ast_nodes import UpdateExpression  # type: ignore[attr-defined]

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


def apply() -> None:
    """Install both (idempotent)."""
    global _applied
    with _apply_lock:
        if _applied:
            return
        _PARSER.make = classmethod(parsed)  # type: ignore[arg-type]
        moto_validators.ActionCountValidator.traverse = _count_sections_at_root  # type: ignore[method-assign]
        _applied = True
