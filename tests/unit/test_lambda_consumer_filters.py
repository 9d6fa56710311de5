"""filterCriteria: Lambda's filter rule syntax over a Kinesis record, each operator kept
and refused, every limit at and past its edge, errors naming the field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shardlog.exceptions import ValidationError
from shardlog.format import LogRecord
from shardlog.lambda_consumer.filters import (
    MAX_DEPTH,
    MAX_FILTERS,
    MAX_PATTERN_CHARS,
    BatchFilter,
    FilterCriteria,
    RuleList,
    parse_criteria,
)


def record(data: Any, *, key: str = "k", seq: int = 7, raw: bytes | None = None) -> LogRecord:
    body = raw if raw is not None else json.dumps(data).encode()
    return LogRecord("shardId-000000000000", seq, key, body, "49", 1_700_000_000_123)


def keeps(pattern: Any, data: Any = None, **kw: Any) -> bool:
    return parse_criteria([{"pattern": pattern}]).keeps(record(data, **kw))


def refused(raw: Any) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        parse_criteria(raw)
    return caught.value


def refused_pattern(pattern: Any) -> str:
    return str(refused([{"pattern": pattern}]))


ORDER = {"order": {"type": "buy", "qty": 1000, "price": 10.5, "note": None, "tags": ["a", "b"]}}


# --- operators ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("rules", "kept"),
    [
        (["buy"], True),
        (["sell"], False),
        (["sell", "buy"], True),  # OR inside a list
        ([{"prefix": "bu"}], True),
        ([{"prefix": "uy"}], False),
        ([{"prefix": ""}], True),
        ([{"suffix": "uy"}], True),
        ([{"suffix": "bu"}], False),
        ([{"prefix": {"equals-ignore-case": "BU"}}], True),
        ([{"suffix": {"equals-ignore-case": "UY"}}], True),
        ([{"equals-ignore-case": "BUY"}], True),
        ([{"equals-ignore-case": "BUYS"}], False),
        ([{"anything-but": "sell"}], True),
        ([{"anything-but": "buy"}], False),
        ([{"anything-but": ["sell", "buy"]}], False),
        ([{"anything-but": {"prefix": "b"}}], False),
        ([{"anything-but": {"prefix": "s"}}], True),
        ([{"anything-but": {"suffix": "y"}}], False),
        ([{"anything-but": {"equals-ignore-case": ["BUY"]}}], False),
        ([{"anything-but": {"equals-ignore-case": "SELL"}}], True),
        ([{"exists": True}], True),
        ([{"exists": False}], False),
        ([{"numeric": [">", 0]}], False),  # a string is not a number
    ],
)
def test_string_rules(rules: list[Any], kept: bool) -> None:
    assert keeps({"data": {"order": {"type": rules}}}, ORDER) is kept


@pytest.mark.parametrize(
    ("rules", "kept"),
    [
        ([1000], True),
        ([1000.0], True),  # numbers compare as numbers
        (["1000"], False),  # a string never equals a number
        ([{"numeric": ["=", 1000]}], True),
        ([{"numeric": ["=", 999]}], False),
        ([{"numeric": [">", 999, "<=", 1000]}], True),
        ([{"numeric": [">", 999, "<", 1000]}], False),
        ([{"numeric": ["<=", 1000, ">=", 1000]}], True),  # bounds in either order
        ([{"numeric": [">=", 1001]}], False),
        ([{"anything-but": [1, 2]}], True),
        ([{"anything-but": 1000}], False),
        ([{"prefix": "10"}], False),  # prefix is for strings
    ],
)
def test_number_rules(rules: list[Any], kept: bool) -> None:
    assert keeps({"data": {"order": {"qty": rules}}}, ORDER) is kept


def test_null_empty_string_and_booleans_are_values() -> None:
    assert keeps({"data": {"order": {"note": [None]}}}, ORDER)
    assert keeps({"data": {"order": {"note": [{"exists": True}]}}}, ORDER)  # null is present
    assert not keeps({"data": {"order": {"missing": [None]}}}, ORDER)  # absent is not null
    assert keeps({"data": {"name": [""]}}, {"name": ""})
    assert not keeps({"data": {"name": [""]}}, {"name": " "})
    assert keeps({"data": {"ok": [True]}}, {"ok": True})
    assert not keeps({"data": {"ok": [True]}}, {"ok": 1})  # true is not 1
    assert not keeps({"data": {"n": [1]}}, {"n": True})


def test_exists_looks_at_leaves_and_absence() -> None:
    assert keeps({"data": {"gone": [{"exists": False}]}}, ORDER)
    assert keeps({"data": {"x": {"y": [{"exists": False}]}}}, ORDER)  # under an absent parent
    # An object is not a leaf (EventBridge's rule): it does not "exist" for exists.
    assert not keeps({"data": {"order": [{"exists": True}]}}, ORDER)
    assert keeps({"data": {"order": {"tags": [{"exists": True}]}}}, ORDER)


def test_anything_but_needs_the_field() -> None:
    assert not keeps({"data": {"colour": [{"anything-but": "red"}]}}, ORDER)


def test_all_fields_must_match_and_or_needs_one() -> None:
    both = {"data": {"order": {"type": ["buy"], "qty": [{"numeric": [">", 5000]}]}}}
    assert not keeps(both, ORDER)
    either = {"data": {"order": {"$or": [{"type": ["sell"]}, {"qty": [{"numeric": [">", 500]}]}]}}}
    assert keeps(either, ORDER)
    neither = {"data": {"order": {"$or": [{"type": ["sell"]}, {"qty": [1]}]}}}
    assert not keeps(neither, ORDER)
    # $or at the top, across data and the metadata
    top = {"$or": [{"partitionKey": ["other"]}, {"data": {"order": {"type": ["buy"]}}}]}
    assert keeps(top, ORDER)


def test_list_values_match_when_an_element_does() -> None:
    assert keeps({"data": {"order": {"tags": ["b"]}}}, ORDER)
    assert not keeps({"data": {"order": {"tags": ["c"]}}}, ORDER)
    assert keeps({"data": {"grid": [3]}}, {"grid": [[1, 2], [[3]]]})  # lists in lists
    assert keeps({"data": {"rows": {"n": [4]}}}, {"rows": [[{"n": 1}], [{"n": 4}]]})
    deep: Any = 1
    for _ in range(5_000):  # deeper than Python's recursion: flattened without recursing
        deep = [deep]
    assert RuleList(rules=(lambda v: v == 1,)).matches(deep)
    items = {"items": [{"sku": "x", "n": 1}, {"sku": "y", "n": 2}]}
    assert keeps({"data": {"items": {"sku": ["y"], "n": [2]}}}, items)
    # Both fields from one element: not x's sku with y's count.
    assert not keeps({"data": {"items": {"sku": ["x"], "n": [2]}}}, items)


def test_the_filters_are_or_ed() -> None:
    criteria = parse_criteria(
        [{"pattern": {"partitionKey": ["a"]}}, {"pattern": {"partitionKey": ["b"]}}]
    )
    assert [criteria.keeps(record({}, key=k)) for k in "abc"] == [True, True, False]


def test_no_filters_keep_everything() -> None:
    for raw in (None, [], {"Filters": []}):
        criteria = parse_criteria(raw)
        assert not criteria
        assert criteria.keeps(record(None, raw=b"\xff not json"))


# --- the record's metadata and non-JSON data ----------------------------------------------
def test_metadata_keys_are_the_kinesis_records() -> None:
    assert keeps({"partitionKey": [{"prefix": "user-"}]}, {}, key="user-1")
    assert keeps({"sequenceNumber": ["7"]}, {}, seq=7)  # the log seq, as the event has it
    assert keeps({"approximateArrivalTimestamp": [{"numeric": [">", 1.7e9]}]}, {})
    assert keeps({"kinesisSchemaVersion": ["1.0"]}, {})


def test_data_that_is_not_json_matches_only_filters_without_data() -> None:
    for raw in (b"plain text", b"\xff\xfe", b"{broken", b""):
        assert keeps({"partitionKey": ["k"]}, raw=raw)
        assert not keeps({"partitionKey": ["k"], "data": {"a": [{"exists": False}]}}, raw=raw)
        assert not keeps({"$or": [{"data": [{"exists": False}]}, {"partitionKey": ["z"]}]}, raw=raw)


def test_json_scalar_data_takes_a_rule_list() -> None:
    assert keeps({"data": [{"numeric": [">", 10]}]}, 42)
    assert not keeps({"data": {"a": ["x"]}}, 42)


# --- shapes accepted ----------------------------------------------------------------------
def test_lambdas_own_shape_and_json_text_are_accepted() -> None:
    text = json.dumps({"data": {"order": {"type": ["buy"]}}})
    for raw in (
        {"Filters": [{"Pattern": text}]},
        {"filters": [{"pattern": text}]},
        [{"pattern": text}],
        [{"pattern": json.loads(text)}],
    ):
        criteria = parse_criteria(raw)
        assert criteria.keeps(record(ORDER))
        assert criteria.as_json() == [{"pattern": '{"data":{"order":{"type":["buy"]}}}'}]


# --- limits at and past their edge --------------------------------------------------------
def test_at_most_five_filters() -> None:
    filters = [{"pattern": {"partitionKey": [str(i)]}} for i in range(MAX_FILTERS + 1)]
    assert len(parse_criteria(filters[:MAX_FILTERS]).filters) == MAX_FILTERS
    error = refused(filters)
    assert error.field == "filterCriteria"
    assert error.limit == MAX_FILTERS
    assert "6 filters: at most 5" in str(error)


def pattern_of_length(chars: int) -> str:
    head = '{"partitionKey":["'
    text = head + "x" * (chars - len(head) - 3) + '"]}'
    assert len(text) == chars
    return text


def test_a_pattern_is_at_most_4096_characters() -> None:
    assert parse_criteria([{"pattern": pattern_of_length(MAX_PATTERN_CHARS)}])
    first = {"pattern": {"partitionKey": ["a"]}}
    error = refused([first, {"pattern": pattern_of_length(MAX_PATTERN_CHARS + 1)}])
    assert error.field == "filterCriteria[1].pattern"
    assert error.limit == MAX_PATTERN_CHARS
    # An object is measured in its compact JSON form.
    big = json.loads(pattern_of_length(MAX_PATTERN_CHARS + 1))
    assert refused([{"pattern": big}]).limit == MAX_PATTERN_CHARS


def nested(depth: int) -> dict[str, Any]:
    """A pattern ``depth`` objects deep, itself included."""
    inner: dict[str, Any] = {"leaf": ["x"]}
    for _ in range(depth - 2):
        inner = {"a": inner}
    return {"data": inner}


def test_nesting_at_and_past_the_limit() -> None:
    assert parse_criteria([{"pattern": nested(MAX_DEPTH)}])
    error = refused([{"pattern": nested(MAX_DEPTH + 1)}])
    assert error.limit == MAX_DEPTH
    assert error.field.startswith("filterCriteria[0].pattern.data.a")
    # $or branches count as levels too, so no pattern recurses without bound
    deep_or: dict[str, Any] = {"partitionKey": ["x"]}
    for _ in range(MAX_DEPTH):
        deep_or = {"$or": [deep_or, {"partitionKey": ["y"]}]}
    assert refused([{"pattern": deep_or}]).limit == MAX_DEPTH
    # JSON text nested past what the parser takes: refused, not a crash
    assert "nested deeper" in refused_pattern('{"data":' + "[" * 2000 + "]" * 2000 + "}")


@pytest.mark.parametrize("edge", [5e9, -5e9, 5_000_000_000])
def test_numeric_range_edges_are_accepted(edge: float) -> None:
    assert keeps({"data": {"n": [{"numeric": ["=", edge]}]}}, {"n": edge})


@pytest.mark.parametrize("past", [5_000_000_001, -5.0000001e9, 1e300])
def test_numeric_past_the_range_is_refused(past: float) -> None:
    error = refused([{"pattern": {"data": {"amount": [{"numeric": [">", past]}]}}}])
    assert error.field == "filterCriteria[0].pattern.data.amount[0].numeric"
    assert "outside -5e9 to 5e9" in str(error)


def test_equality_takes_numbers_of_any_size() -> None:
    assert keeps({"data": {"id": [12345678901234]}}, {"id": 12345678901234})


# --- refusals name the field --------------------------------------------------------------
@pytest.mark.parametrize(
    ("pattern", "field", "words"),
    [
        ("{not json", "filterCriteria[0].pattern", "is not JSON"),
        ('["a"]', "filterCriteria[0].pattern", "non-empty JSON object"),
        ({}, "filterCriteria[0].pattern", "non-empty JSON object"),
        ({"eventSource": ["aws:kinesis"]}, "filterCriteria[0].pattern.eventSource", "not a key"),
        (
            {"$or": [{"partitionKey": ["x"]}, {"shard": ["x"]}]},
            "filterCriteria[0].pattern.$or[1].shard",
            "not a key",
        ),
        ({"$or": [{"partitionKey": ["x"]}]}, "filterCriteria[0].pattern.$or", "at least 2"),
        ({"partitionKey": {"a": ["x"]}}, "filterCriteria[0].pattern.partitionKey", "list of"),
        ({"data": {"amount": 5}}, "filterCriteria[0].pattern.data.amount", "list of rules"),
        ({"data": {"amount": []}}, "filterCriteria[0].pattern.data.amount", "empty list"),
        ({"data": {"amount": {}}}, "filterCriteria[0].pattern.data.amount", "empty object"),
        ({"data": {"a": [["x"]]}}, "filterCriteria[0].pattern.data.a[0]", "flatten"),
        ({"data": {"a": [{}]}}, "filterCriteria[0].pattern.data.a[0]", "one operator"),
        (
            {"data": {"a": [{"prefix": "x", "suffix": "y"}]}},
            "filterCriteria[0].pattern.data.a[0]",
            "one operator",
        ),
        ({"data": {"a": [{"contains": "x"}]}}, "filterCriteria[0].pattern.data.a[0]", "unknown"),
        ({"data": {"a": [{"wildcard": "*"}]}}, "filterCriteria[0].pattern.data.a[0]", "unknown"),
        ({"data": {"a": [{"prefix": 5}]}}, "filterCriteria[0].pattern.data.a[0].prefix", "string"),
        (
            {"data": {"a": [{"prefix": {"anything-but": "x"}}]}},
            "filterCriteria[0].pattern.data.a[0].prefix",
            "equals-ignore-case",
        ),
        ({"data": {"a": [{"exists": "yes"}]}}, "filterCriteria[0].pattern.data.a[0].exists", ""),
        (
            {"data": {"a": [{"anything-but": []}]}},
            "filterCriteria[0].pattern.data.a[0].anything-but",
            "empty list",
        ),
        (
            {"data": {"a": [{"anything-but": ["x", 1]}]}},
            "filterCriteria[0].pattern.data.a[0].anything-but",
            "only one",
        ),
        (
            {"data": {"a": [{"anything-but": {"numeric": [">", 1]}}]}},
            "filterCriteria[0].pattern.data.a[0].anything-but",
            "prefix, suffix",
        ),
        (
            {"data": {"amount": [{"numeric": [">", "10"]}]}},
            "filterCriteria[0].pattern.data.amount[0].numeric",
            "must be a number",
        ),
        (
            {"data": {"amount": [{"numeric": ["!=", 1]}]}},
            "filterCriteria[0].pattern.data.amount[0].numeric",
            "expected",
        ),
        (
            {"data": {"amount": [{"numeric": [">", 1, ">=", 2]}]}},
            "filterCriteria[0].pattern.data.amount[0].numeric",
            "two lower bounds",
        ),
        (
            {"data": {"amount": [{"numeric": ["=", 1, "<", 2]}]}},
            "filterCriteria[0].pattern.data.amount[0].numeric",
            "'='",
        ),
        (
            {"data": {"amount": [{"numeric": [">", 5, "<", 5]}]}},
            "filterCriteria[0].pattern.data.amount[0].numeric",
            "is empty",
        ),
        (
            {"data": {"amount": [{"numeric": [">", 1, "<"]}]}},
            "filterCriteria[0].pattern.data.amount[0].numeric",
            "must be",
        ),
        ({"data": {"$or": []}}, "filterCriteria[0].pattern.data.$or", "at least 2"),
        ({"data": {"$or": {"a": ["x"]}}}, "filterCriteria[0].pattern.data.$or", "at least 2"),
        (
            {"data": {"$or": [{"a": ["x"]}, {}]}},
            "filterCriteria[0].pattern.data.$or[1]",
            "non-empty object",
        ),
        ({"data": {"a": [float("nan")]}}, "filterCriteria[0].pattern", "not JSON"),
    ],
)
def test_an_invalid_pattern_is_one_error_naming_the_field(
    pattern: Any, field: str, words: str
) -> None:
    error = refused([{"pattern": pattern}])
    assert error.field == field
    assert str(error).startswith(f"{field}: ")
    assert words in str(error)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ("not a list", "filterCriteria"),
        ({"patterns": []}, "filterCriteria"),
        ([["x"]], "filterCriteria[0]"),
        ([{"pattern": {"partitionKey": ["x"]}, "extra": 1}], "filterCriteria[0]"),
    ],
)
def test_the_criteria_shape_is_checked(raw: Any, field: str) -> None:
    assert refused(raw).field == field


# --- counting what a run filtered out -----------------------------------------------------
def test_a_retried_range_is_counted_once() -> None:
    criteria = parse_criteria([{"pattern": {"partitionKey": ["keep"]}}])
    batch = [record({}, key="keep" if s % 2 else "drop", seq=s) for s in range(6)]
    counter = BatchFilter(criteria)
    assert [r.seq for r in counter.keep(batch)] == [1, 3, 5]
    assert counter.filtered_out == 3
    assert [r.seq for r in counter.keep(batch[2:5])] == [3]  # a retry of part of it
    assert counter.filtered_out == 3
    counter.keep([record({}, key="drop", seq=6)])
    assert counter.filtered_out == 4


def test_without_filters_nothing_is_counted() -> None:
    counter = BatchFilter(FilterCriteria())
    batch = [record({}, seq=s) for s in range(3)]
    assert counter.keep(batch) == batch
    assert counter.filtered_out == 0
