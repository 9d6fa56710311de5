"""A Lambda consumer group's ``filterCriteria``: Lambda's event filtering for Kinesis.

Syntax (Lambda's filter rule syntax, which is EventBridge's event patterns). A group has
up to ``MAX_FILTERS`` filters; a record is **kept** (invoked) when at least one filter
matches it, and **filtered out** otherwise. No filters: every record is kept. Each filter
is a JSON object (or its JSON text, as Lambda's ``Pattern``) of at most
``MAX_PATTERN_CHARS`` characters over the record as the event source mapping sees it:

- ``data``: the record's data decoded as UTF-8 JSON (an object pattern, or a rule list
  for a JSON scalar). Data that is not JSON matches no filter that names ``data``; a
  filter on the metadata keys only is matched as usual (the ESM's rule);
- the metadata keys ``partitionKey``, ``sequenceNumber`` (the log seq, as the event
  carries it), ``approximateArrivalTimestamp`` (epoch seconds) and
  ``kinesisSchemaVersion``; any other top-level key is refused.

Every field of a pattern must match (AND). A field's value is either an object (fields
below it) or a non-empty list of rules, any of which may match (OR):

- a string, number, ``true``/``false`` or ``null``: equality (numbers compare as numbers;
  ``""`` is the empty string, ``null`` a JSON null that is present);
- ``{"prefix": s}``, ``{"suffix": s}`` (each also ``{"equals-ignore-case": s}`` inside),
  ``{"equals-ignore-case": s}``: strings only;
- ``{"anything-but": v}``: v a string, a number, a non-empty list of strings or of
  numbers, or ``{"prefix": s}``, ``{"suffix": s}``, ``{"equals-ignore-case": s | [s]}``;
  the field must be present;
- ``{"numeric": ["=", n]}`` or one lower bound (``>``, ``>=``) and/or one upper bound
  (``<``, ``<=``): JSON numbers only, n within +-5e9 (EventBridge's range);
- ``{"exists": true | false}``: present as a leaf (not an object) or not.

``"$or": [pattern, pattern, ...]`` beside fields: at least one of the patterns must match
too. A record field holding a list (lists inside it flattened) matches a rule list when
any element does, and an object pattern when any element object matches it whole
(EventBridge's array consistency).

Limits are checked when the settings are built (synth, the runner's cold start, ``shardlog
local up``): ``MAX_FILTERS``, ``MAX_PATTERN_CHARS`` per filter, ``MAX_DEPTH`` nested
objects (shardlog's bound: Lambda documents none). A pattern that breaks one raises one
ValidationError naming the field, e.g. ``filterCriteria[1].pattern.data.amount``.

Filtering is pure: no request. The runner applies it to each batch the feed returns
(shardlog/lambda_consumer/delivery.py); the checkpoint moves past filtered-out records as
past delivered ones.
"""

from __future__ import annotations

import json
import math
import operator as ops
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from shardlog.exceptions import ValidationError
from shardlog.format import LogRecord

FIELD: Final = "filterCriteria"
MAX_FILTERS: Final = 5  # Lambda's default quota per event source mapping
MAX_PATTERN_CHARS: Final = 4_096  # Lambda's Filter.Pattern length
MAX_DEPTH: Final = 16  # nested objects in a pattern (a bound on the matcher's recursion)
NUMERIC_LIMIT: Final = 5e9  # EventBridge's numeric matching range: -5e9 to 5e9
DATA: Final = "data"
OR: Final = "$or"
KINESIS_SCHEMA_VERSION: Final = "1.0"
METADATA_KEYS: Final = (
    "partitionKey",
    "sequenceNumber",
    "approximateArrivalTimestamp",
    "kinesisSchemaVersion",
)
STRING_OPERATORS: Final = ("prefix", "suffix", "equals-ignore-case")
OPERATORS: Final = (*STRING_OPERATORS, "anything-but", "numeric", "exists")
LOWER: Final[dict[str, Callable[[Any, Any], bool]]] = {">": ops.gt, ">=": ops.ge}
UPPER: Final[dict[str, Callable[[Any, Any], bool]]] = {"<": ops.lt, "<=": ops.le}

_MISSING: Final = object()  # a field the record does not have
_NOT_JSON: Final = object()  # data that is not UTF-8 JSON

Rule = Callable[[Any], bool]  # one rule against one present scalar value


# --- compiled patterns ----------------------------------------------------------------------
@dataclass(frozen=True)
class RuleList:
    """OR of rules on one field. ``exists`` rules look at the field itself, the others at
    its value (each element of a list)."""

    rules: tuple[Rule, ...] = ()
    exists: tuple[bool, ...] = ()

    def matches(self, value: Any) -> bool:
        is_leaf = value is not _MISSING and not isinstance(value, dict)
        if any(want == is_leaf for want in self.exists):
            return True
        if not is_leaf:
            return False
        return any(rule(v) for v in _elements(value) for rule in self.rules)


def _elements(value: Any) -> list[Any]:
    """A value's elements, lists inside lists flattened (EventBridge crushes arrays out)."""
    if not isinstance(value, list):
        return [value]
    out: list[Any] = []
    stack = [iter(value)]
    while stack:  # no recursion: record data may nest lists deeply
        item = next(stack[-1], _MISSING)
        if item is _MISSING:
            stack.pop()
        elif isinstance(item, list):
            stack.append(iter(item))
        else:
            out.append(item)
    return out


@dataclass(frozen=True)
class ObjectPattern:
    """AND of fields, and of each ``$or`` group (OR of patterns)."""

    fields: tuple[tuple[str, ObjectPattern | RuleList], ...]
    alternatives: tuple[tuple[ObjectPattern, ...], ...] = ()

    def matches(self, value: Any) -> bool:
        if isinstance(value, list):  # any element object, matched whole
            return any(self.matches(v) for v in _elements(value) if isinstance(v, dict))
        fields = value if isinstance(value, dict) else {}  # absent: only "exists": false
        return all(p.matches(fields.get(k, _MISSING)) for k, p in self.fields) and all(
            any(p.matches(value) for p in group) for group in self.alternatives
        )

    @property
    def names_data(self) -> bool:
        return any(k == DATA for k, _ in self.fields) or any(
            p.names_data for group in self.alternatives for p in group
        )


@dataclass(frozen=True)
class Filter:
    text: str  # the pattern as compact JSON (what the settings document carries)
    pattern: ObjectPattern

    def matches(self, record: Mapping[str, Any]) -> bool:
        if record[DATA] is _NOT_JSON and self.pattern.names_data:
            return False  # the ESM drops non-JSON data for any filter on data
        return self.pattern.matches(record)


@dataclass(frozen=True)
class FilterCriteria:
    filters: tuple[Filter, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.filters)

    def keeps(self, record: LogRecord) -> bool:
        """Whether the group's function gets this record (no filters: every record)."""
        if not self.filters:
            return True
        view = record_view(record)
        return any(f.matches(view) for f in self.filters)

    def as_json(self) -> list[dict[str, str]]:
        return [{"pattern": f.text} for f in self.filters]


def record_view(record: LogRecord) -> dict[str, Any]:
    """The record as a filter sees it: Lambda's Kinesis record, ``data`` decoded."""
    return {
        DATA: decode_data(record.data),
        "partitionKey": record.partition_key,
        "sequenceNumber": str(record.seq),
        "approximateArrivalTimestamp": record.arrival_ms / 1000,
        "kinesisSchemaVersion": KINESIS_SCHEMA_VERSION,
    }


def decode_data(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return _NOT_JSON


@dataclass
class BatchFilter:
    """The runner's filter over the batches of one run: keeps what the group's function
    gets and counts each filtered-out record once per run (a retried range is filtered
    again; the high-water mark keeps it from being counted twice)."""

    criteria: FilterCriteria
    filtered_out: int = 0
    _counted_to: int = field(default=0, repr=False)  # seqs below it were counted

    def keep(self, batch: Sequence[LogRecord]) -> list[LogRecord]:
        if not self.criteria:
            return list(batch)
        kept = []
        for record in batch:
            if self.criteria.keeps(record):
                kept.append(record)
            elif record.seq >= self._counted_to:
                self.filtered_out += 1
            self._counted_to = max(self._counted_to, record.seq + 1)
        return kept


# --- parsing and validation ----------------------------------------------------------------
def parse_criteria(raw: Any) -> FilterCriteria:
    """``filterCriteria`` as the settings take it: a list of ``{"pattern": P}`` (P an object
    or its JSON text), or Lambda's own ``{"Filters": [{"Pattern": "..."}]}``; None or
    empty: no filters. Raises one ValidationError naming the field."""
    if raw is None:
        return FilterCriteria()
    if isinstance(raw, FilterCriteria):
        return raw
    if isinstance(raw, Mapping):
        raw = _only_key(raw, "filters", FIELD)
    if not isinstance(raw, list | tuple):
        raise ValidationError(FIELD, 'must be a list of filters, each {"pattern": ...}')
    if len(raw) > MAX_FILTERS:
        raise ValidationError(
            FIELD,
            f"{len(raw)} filters: at most {MAX_FILTERS} (Lambda's quota per mapping)",
            limit=MAX_FILTERS,
        )
    return FilterCriteria(tuple(_filter(item, f"{FIELD}[{i}]") for i, item in enumerate(raw)))


def _filter(item: Any, where: str) -> Filter:
    if not isinstance(item, Mapping):
        raise ValidationError(where, 'must be an object {"pattern": ...}')
    where = f"{where}.pattern"
    raw = _only_key(item, "pattern", where.rsplit(".", 1)[0])
    text = raw if isinstance(raw, str) else _compact(raw, where)
    if len(text) > MAX_PATTERN_CHARS:
        raise ValidationError(
            where,
            f"{len(text)} characters: at most {MAX_PATTERN_CHARS} (Lambda's limit)",
            limit=MAX_PATTERN_CHARS,
        )
    if isinstance(raw, str):
        try:
            raw = json.loads(text)
        except RecursionError:
            raise ValidationError(where, f"nested deeper than {MAX_DEPTH} levels") from None
        except ValueError as exc:
            raise ValidationError(where, f"is not JSON: {exc}") from None
    if not isinstance(raw, dict) or not raw:
        raise ValidationError(where, "must be a non-empty JSON object of fields")
    pattern = _object(raw, where, depth=1, top=True)
    return Filter(_compact(raw, where), pattern)


def _only_key(raw: Mapping[str, Any], key: str, where: str) -> Any:
    """The value of ``key`` (any case: Lambda's API capitalizes it), nothing else."""
    keys = list(raw)
    if len(keys) != 1 or keys[0].lower() != key:
        raise ValidationError(where, f'must be an object with "{key}" only, got keys {keys}')
    return raw[keys[0]]


def _object(raw: dict[str, Any], where: str, *, depth: int, top: bool = False) -> ObjectPattern:
    if depth > MAX_DEPTH:
        raise ValidationError(where, f"nested deeper than {MAX_DEPTH} objects", limit=MAX_DEPTH)
    fields: list[tuple[str, ObjectPattern | RuleList]] = []
    alternatives: list[tuple[ObjectPattern, ...]] = []
    for key, value in raw.items():
        here = f"{where}.{key}"
        if top and key not in (DATA, OR, *METADATA_KEYS):
            raise ValidationError(
                here,
                "not a key of a Kinesis record: filter on data or on " + ", ".join(METADATA_KEYS),
            )
        if key == OR:
            alternatives.append(_alternatives(value, here, depth, top=top))
        elif isinstance(value, dict):
            if top and key != DATA:
                raise ValidationError(here, "is a string or number: give a list of rules")
            if not value:
                raise ValidationError(here, "an empty object: give fields or a list of rules")
            fields.append((key, _object(value, here, depth=depth + 1)))
        elif isinstance(value, list):
            fields.append((key, _rules(value, here)))
        else:
            raise ValidationError(
                here, f"must be a list of rules or an object of fields, got {_show(value)}"
            )
    return ObjectPattern(tuple(fields), tuple(alternatives))


def _alternatives(value: Any, where: str, depth: int, *, top: bool) -> tuple[ObjectPattern, ...]:
    if not isinstance(value, list) or len(value) < 2:
        raise ValidationError(  # with fewer, EventBridge reads a field named "$or"
            where, "must be a list of at least 2 patterns (one of them must match)"
        )
    patterns = []
    for i, item in enumerate(value):
        if not isinstance(item, dict) or not item:
            raise ValidationError(f"{where}[{i}]", "must be a non-empty object of fields")
        patterns.append(_object(item, f"{where}[{i}]", depth=depth + 1, top=top))
    return tuple(patterns)


def _rules(value: list[Any], where: str) -> RuleList:
    if not value:
        raise ValidationError(where, "an empty list matches nothing: give at least one rule")
    rules: list[Rule] = []
    exists: list[bool] = []
    for i, item in enumerate(value):
        here = f"{where}[{i}]"
        if isinstance(item, dict):
            operator, argument = _operator(item, here)
            if operator == "exists":
                if not isinstance(argument, bool):
                    raise ValidationError(f"{here}.exists", "must be true or false")
                exists.append(argument)
            else:
                rules.append(_RULE_BUILDERS[operator](argument, f"{here}.{operator}"))
        elif isinstance(item, list):
            raise ValidationError(here, "a list inside a rule list: flatten it")
        else:
            rules.append(_equals(item, here))
    return RuleList(tuple(rules), tuple(exists))


def _operator(item: dict[str, Any], where: str) -> tuple[str, Any]:
    if len(item) != 1:
        raise ValidationError(where, f"one operator per rule, got {sorted(item)}")
    ((operator, argument),) = item.items()
    if operator not in OPERATORS:
        raise ValidationError(
            where,
            f"unknown operator {operator!r}: Lambda's filters take " + ", ".join(OPERATORS),
        )
    return operator, argument


# --- rules -----------------------------------------------------------------------------------
def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equals(expected: Any, where: str) -> Rule:
    if _is_number(expected):  # any size: only numeric ranges are bounded
        if not math.isfinite(expected):
            raise ValidationError(where, f"must be a finite number, got {expected}")
        return lambda v: _is_number(v) and v == expected
    if expected is None or isinstance(expected, str | bool):
        return lambda v: type(v) is type(expected) and v == expected
    raise ValidationError(where, f"cannot be matched: {_show(expected)}")


def _string(argument: Any, where: str) -> str:
    if not isinstance(argument, str):
        raise ValidationError(where, f"must be a string, got {_show(argument)}")
    return argument


def _affix(kind: str) -> Callable[[Any, str], Rule]:
    """``prefix`` or ``suffix``, optionally ``{"equals-ignore-case": s}``."""

    def build(argument: Any, where: str) -> Rule:
        fold = isinstance(argument, dict)
        if fold:
            operator, argument = _operator(argument, where)
            if operator != "equals-ignore-case":
                raise ValidationError(where, f"{kind} takes a string or equals-ignore-case")
            where = f"{where}.{operator}"
        affix = _string(argument, where)
        affix = affix.casefold() if fold else affix

        def rule(v: Any) -> bool:
            if not isinstance(v, str):
                return False
            text = v.casefold() if fold else v
            return text.startswith(affix) if kind == "prefix" else text.endswith(affix)

        return rule

    return build


def _ignore_case(argument: Any, where: str) -> Rule:
    expected = _string(argument, where).casefold()
    return lambda v: isinstance(v, str) and v.casefold() == expected


def _anything_but(argument: Any, where: str) -> Rule:
    if isinstance(argument, dict):
        operator, inner = _operator(argument, where)
        if operator not in STRING_OPERATORS:
            raise ValidationError(where, "anything-but takes prefix, suffix or equals-ignore-case")
        here = f"{where}.{operator}"
        if operator == "equals-ignore-case":
            values = inner if isinstance(inner, list) else [inner]
            if not values:
                raise ValidationError(here, "an empty list: give at least one string")
            folded = {_string(v, here).casefold() for v in values}
            return lambda v: isinstance(v, str) and v.casefold() not in folded
        positive = _affix(operator)(inner, here)
        return lambda v: isinstance(v, str) and not positive(v)
    values = argument if isinstance(argument, list) else [argument]
    if not values:
        raise ValidationError(where, "an empty list: give at least one value")
    if all(isinstance(v, str) for v in values):
        strings = set(values)
        return lambda v: not (isinstance(v, str) and v in strings)
    if all(_is_number(v) for v in values):
        numbers = {_number(v, where) for v in values}
        return lambda v: not (_is_number(v) and v in numbers)
    raise ValidationError(where, "must be a string, a number, or a list of only one of them")


def _numeric(argument: Any, where: str) -> Rule:
    if not isinstance(argument, list) or len(argument) not in (2, 4):
        raise ValidationError(
            where, 'must be ["=", n], [op, n] or [op, n, op, n] (op one of >, >=, <, <=)'
        )
    pairs = [(argument[i], argument[i + 1]) for i in range(0, len(argument), 2)]
    checks: list[tuple[Callable[[Any, Any], bool], float]] = []
    bounds: dict[str, tuple[str, float]] = {}
    for operator, value in pairs:
        number = _number(value, where)
        if operator == "=" and len(pairs) == 1:
            checks.append((ops.eq, number))
            continue
        side = "lower" if operator in LOWER else "upper" if operator in UPPER else None
        if side is None:
            raise ValidationError(
                where, f'{operator!r}: expected >, >=, <, <= (or = alone, as ["=", n])'
            )
        if side in bounds:
            raise ValidationError(where, f"two {side} bounds: give at most one of each")
        bounds[side] = (operator, number)
        checks.append(({**LOWER, **UPPER}[operator], number))
    if "lower" in bounds and "upper" in bounds:
        (low_op, low), (high_op, high) = bounds["lower"], bounds["upper"]
        if low > high or (low == high and (low_op, high_op) != (">=", "<=")):
            raise ValidationError(where, f"the range {low_op} {low} and {high_op} {high} is empty")
    return lambda v: _is_number(v) and all(compare(v, n) for compare, n in checks)


def _number(value: Any, where: str) -> float:
    if not _is_number(value) or not math.isfinite(value):
        raise ValidationError(where, f"must be a number, got {_show(value)}")
    if abs(value) > NUMERIC_LIMIT:
        raise ValidationError(
            where,
            f"{value} is outside -5e9 to 5e9 (the numeric matching range)",
            limit=NUMERIC_LIMIT,
        )
    return float(value)


_RULE_BUILDERS: Final[dict[str, Callable[[Any, str], Rule]]] = {
    "prefix": _affix("prefix"),
    "suffix": _affix("suffix"),
    "equals-ignore-case": _ignore_case,
    "anything-but": _anything_but,
    "numeric": _numeric,
}


def _compact(value: Any, where: str) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except RecursionError:
        raise ValidationError(where, f"nested deeper than {MAX_DEPTH} levels") from None
    except (TypeError, ValueError) as exc:
        raise ValidationError(where, f"is not JSON: {exc}") from None


def _show(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
