"""A declared table's payloads parsed, typed and validated as DataFrame transforms
(``shardlog.spark.payloads``), on the shared local session: typed values equal to the
payload's, and each kind of refusal named by its field."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pytest
from pyspark.testing import assertDataFrameEqual

from shardlog.lake.declared import LOG_COLUMNS, parse_lake_tables
from shardlog.spark.io import RECORD_SCHEMA
from shardlog.spark.payloads import ERROR_FIELD, ERROR_REASON, MATCHED, parse_payloads

P0 = "shardId-000000000000"
ORDERS = parse_lake_tables(
    [
        {
            "name": "orders",
            "schema": {
                "type": "object",
                "required": ["orderId", "amount"],
                "properties": {
                    "orderId": {"type": "string"},
                    "amount": {"type": "string", "format": "decimal", "precision": 10, "scale": 2},
                    "quantity": {"type": "integer", "minimum": 1, "maximum": 100},
                    "count": {"type": "integer"},
                    "weight": {"type": "number"},
                    "gift": {"type": "boolean"},
                    "placedAt": {"type": "string", "format": "date-time"},
                    "day": {"type": "string", "format": "date"},
                    "address": {
                        "type": "object",
                        "required": ["country"],
                        "properties": {
                            "country": {"type": "string"},
                            "floor": {"type": "integer"},
                        },
                    },
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "lines": {
                        "type": "array",
                        "items": {"type": "object", "properties": {"skuId": {"type": "string"}}},
                    },
                },
            },
        }
    ],
    "test",
).tables[0]
GOOD = {"orderId": "o-1", "amount": "12.50"}


def records(spark: Any, payloads: list[bytes], key: str = "k") -> Any:
    arrival = datetime(2024, 3, 1, 10, tzinfo=UTC)
    rows = [
        (P0, seq, key, bytearray(p), str(seq), arrival, arrival, None)
        for seq, p in enumerate(payloads)
    ]
    return spark.createDataFrame(rows, RECORD_SCHEMA)


def errors_of(spark: Any, payloads: list[Any]) -> Any:
    raw = [p if isinstance(p, bytes) else json.dumps(p).encode() for p in payloads]
    return parse_payloads(records(spark, raw), ORDERS).select("seq", ERROR_FIELD, ERROR_REASON)


def test_typed_values_equal_the_payloads(spark: Any) -> None:
    payload = {
        "orderId": "o-1",
        "amount": 12.5,
        "quantity": 3,
        "count": 2**62,
        "weight": 1.25,
        "gift": True,
        "placedAt": "2024-03-01T10:15:30.123456+02:00",
        "day": "2024-02-29",
        "address": {"country": "FR", "floor": 4, "ignored": "x"},
        "tags": ["a", "b"],
        "lines": [{"skuId": "s-1"}, {"skuId": "s-2"}],
        "notDeclared": {"kept": "only in the raw table"},
    }
    sparse = {"orderId": 7, "amount": "0.01", "quantity": None}  # a number as a string's text
    parsed = parse_payloads(
        records(spark, [json.dumps(payload).encode(), json.dumps(sparse).encode()]), ORDERS
    )
    assert parsed.columns == [
        *LOG_COLUMNS,
        *(c for c in ORDERS.typed_schema().names if c not in LOG_COLUMNS),
        "_data",
        MATCHED,
        ERROR_FIELD,
        ERROR_REASON,
    ]
    actual = parsed.drop("partition_id", "partition_key", "arrival_time", "record_id", "_data")
    expected = spark.createDataFrame(
        [
            (
                0,
                "o-1",
                Decimal("12.50"),
                3,
                2**62,
                1.25,
                True,
                datetime(2024, 3, 1, 8, 15, 30, 123456, tzinfo=UTC),
                date(2024, 2, 29),
                ("FR", 4),
                ["a", "b"],
                [("s-1",), ("s-2",)],
                True,
                None,
                None,
            ),
            (
                1,
                "7",
                Decimal("0.01"),
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                None,
                True,
                None,
                None,
            ),
        ],
        "seq long, order_id string, amount decimal(10,2), quantity long, count long, "
        "weight double, gift boolean, placed_at timestamp, day date, "
        "address struct<country:string,floor:long>, tags array<string>, "
        "lines array<struct<sku_id:string>>, _matched boolean, _error_field string, "
        "_error_reason string",
    )
    assertDataFrameEqual(actual, expected)


def test_each_kind_of_refusal_is_named_by_its_field(spark: Any) -> None:
    payloads = [
        b"not json at all",
        b"[1, 2]",
        b'"a string"',
        {"amount": "1.00"},
        {"orderId": None, "amount": "1.00"},
        {**GOOD, "quantity": "three"},
        {**GOOD, "quantity": 1.5},
        {**GOOD, "count": 2**64},
        {**GOOD, "quantity": 0},
        {**GOOD, "quantity": 101},
        {**GOOD, "amount": "1.234"},
        {**GOOD, "amount": 123456789012},
        {**GOOD, "gift": "yes"},
        {**GOOD, "placedAt": "yesterday"},
        {**GOOD, "address": 5},
        {**GOOD, "address": {"floor": 1}},
        {**GOOD, "address": {"country": "FR", "floor": "third"}},
        {**GOOD, "tags": "a"},
        {**GOOD, "weight": "heavy", "gift": "yes"},  # the first declared field is named
        b'{"orderId": "o", "amount": 1, "orderId": "p"}',  # a key twice: the last one holds
        b'{"orderId": null, "amount": 1, "orderId": "p"}',
        b'{"orderId": "o", "amount": 1, "orderId": null}',
        b"\xff\xfe\x00",
        # No such day: refused, not read as the next day, and not the job's failure.
        {**GOOD, "day": "2023-02-29"},
        {**GOOD, "placedAt": "2024-02-30T10:00:00Z"},
        {**GOOD, "day": "2024-02-29"},  # a leap day is one
        # decimal(10,2): eight integer digits at most, whatever the sign
        {**GOOD, "amount": "99999999.99"},
        {**GOOD, "amount": -99999999.99},
        {**GOOD, "amount": "100000000"},
        {**GOOD, "amount": "-100000000.00"},
    ]
    expected = spark.createDataFrame(
        [
            (0, "(payload)", "not a JSON object"),
            (1, "(payload)", "not a JSON object"),
            (2, "(payload)", "not a JSON object"),
            (3, "orderId", "required, missing"),
            (4, "orderId", "required, missing"),
            (5, "quantity", "not an integer (64-bit)"),
            (6, "quantity", "not an integer (64-bit)"),
            (7, "count", "not an integer (64-bit)"),
            (8, "quantity", "0 is below the minimum 1"),
            (9, "quantity", "101 is above the maximum 100"),
            (10, "amount", "1.234 has more than 2 decimal places"),
            (11, "amount", "not a decimal(10,2)"),
            (12, "gift", "not a boolean"),
            (13, "placedAt", "not a date-time string"),
            (14, "address", "not a JSON object"),
            (15, "address.country", "required, missing"),
            (16, "address.floor", "not an integer (64-bit)"),
            (17, "tags", "not an array of string"),
            (18, "weight", "not a number"),
            (19, None, None),
            (20, None, None),
            (21, "orderId", "required, missing"),
            (22, "(payload)", "not a JSON object"),
            (23, "day", "not a date string"),
            (24, "placedAt", "not a date-time string"),
            (25, None, None),
            (26, None, None),
            (27, None, None),
            (28, "amount", "not a decimal(10,2)"),
            (29, "amount", "not a decimal(10,2)"),
        ],
        "seq long, _error_field string, _error_reason string",
    )
    assertDataFrameEqual(errors_of(spark, payloads), expected)


def test_a_record_that_fits_has_no_error(spark: Any) -> None:
    actual = errors_of(spark, [GOOD, {**GOOD, "quantity": 1}, {**GOOD, "quantity": 100}])
    expected = spark.createDataFrame(
        [(0, None, None), (1, None, None), (2, None, None)],
        "seq long, _error_field string, _error_reason string",
    )
    assertDataFrameEqual(actual, expected)  # the bounds are inclusive


@pytest.mark.parametrize(
    ("record_filter", "matched"),
    [
        ({"partitionKeyPrefix": "order-"}, [True, True, False, True]),
        ({"field": "kind", "equals": "sale"}, [True, False, True, False]),
        (
            {"partitionKeyPrefix": "order-", "field": "kind", "equals": "sale"},
            [True, False, False, False],
        ),
        ({"field": "n", "equals": 1}, [False, True, False, False]),
    ],
)
def test_the_record_filter(spark: Any, record_filter: dict[str, Any], matched: list[bool]) -> None:
    declared = ORDERS.model_copy(update={"filter": parse_lake_tables(
        [{"name": "t", "schema": {"type": "object", "properties": {"a": {"type": "string"}}},
          "filter": record_filter}], "test").tables[0].filter})  # fmt: skip
    rows = [
        ("order-1", {"kind": "sale"}),
        ("order-2", {"kind": "refund", "n": 1}),
        ("user-3", {"kind": "sale"}),
        ("order-4", None),  # not JSON: no field filter matches it
    ]
    arrival = datetime(2024, 3, 1, tzinfo=UTC)
    frame = spark.createDataFrame(
        [
            (
                P0,
                i,
                key,
                bytearray(json.dumps(p).encode() if p else b"{oops"),
                str(i),
                arrival,
                arrival,
                None,
            )
            for i, (key, p) in enumerate(rows)
        ],
        RECORD_SCHEMA,
    )
    actual = parse_payloads(frame, declared).select("seq", MATCHED, ERROR_FIELD)
    # A record not the table's is neither typed nor rejected: its errors are not looked for.
    first = ["orderId", "orderId", "orderId", "(payload)"]  # ORDERS' first error of each
    errors = [error if m else None for error, m in zip(first, matched, strict=True)]
    expected = spark.createDataFrame(
        list(zip(range(4), matched, errors, strict=True)),
        f"seq long, {MATCHED} boolean, {ERROR_FIELD} string",
    )
    assertDataFrameEqual(actual, expected)


def test_the_typed_tables_spark_schema_is_its_declared_one(spark: Any) -> None:
    """Spark's own parse of the derived DDL (nested, decimal, list columns) is the derived
    StructType, column for column."""
    schema = ORDERS.typed_schema()
    assert spark.createDataFrame([], schema.spark_ddl()).schema == schema.spark_struct()


def parses(plan: Any) -> dict[str, int]:
    """The JSON parses (``from_json``) of an optimized plan that ``every`` record pays (one
    per distinct expression of each projection: Spark computes a repeated one once), and
    those only in a ``branch`` some records take (a CASE WHEN's later conditions and its
    values, a COALESCE's later arguments, the right side of AND / OR: Spark evaluates them
    only when reached; or a parse of a CASE WHEN's text, null where its condition does not
    hold, and ``from_json`` parses no null)."""
    every: set[tuple[int, str]] = set()
    branch = 0

    def walk(node: int, expr: Any, eager: bool) -> None:
        nonlocal branch
        kind = expr.getClass().getSimpleName()
        gated = kind == "JsonToStructs" and expr.child().getClass().getSimpleName() == "CaseWhen"
        if kind == "JsonToStructs" and eager and not gated:
            every.add((node, expr.canonicalized().toString()))
        elif kind == "JsonToStructs":
            branch += 1
        children = [expr.children().apply(i) for i in range(expr.children().size())]
        taken = 1 if kind in ("CaseWhen", "Coalesce", "If", "And", "Or") else len(children)
        for i, child in enumerate(children):
            walk(node, child, eager and i < taken)

    nodes = [plan]
    while nodes:
        node = nodes.pop()
        for i in range(node.expressions().size()):
            walk(id(node), node.expressions().apply(i), True)
        nodes += [node.children().apply(i) for i in range(node.children().size())]
    return {"every": len(every), "branch": branch}


def test_each_object_level_is_read_once_per_record(spark: Any) -> None:
    """The optimized plan parses each object level's text once for every record (its
    strict struct), whatever the number of properties or errors; the reads that name a
    refused record's error (its properties as a map, each property alone) sit in branches
    only such a record takes. Inline, Spark's optimizer splits the strict read into one
    parse per property and evaluates the error twice over."""
    parsed = parse_payloads(records(spark, [json.dumps(GOOD).encode()]), ORDERS)
    counts = parses(parsed._jdf.queryExecution().optimizedPlan())
    levels = 2  # the payload and its nested object "address"
    assert counts["every"] == levels
    assert counts["branch"] >= len(ORDERS.payload.properties)
    # With a record filter, a record not the table's is not parsed at all.
    only = ORDERS.model_copy(update={"filter": parse_lake_tables([{"name": "t",
        "schema": {"type": "object", "properties": {"a": {"type": "string"}}},
        "filter": {"partitionKeyPrefix": "order-"}}], "test").tables[0].filter})  # fmt: skip
    filtered = parse_payloads(records(spark, [json.dumps(GOOD).encode()]), only)
    assert parses(filtered._jdf.queryExecution().optimizedPlan())["every"] == 0


def test_the_jobs_session_reads_dates_by_one_calendar(spark: Any) -> None:
    """What a job's own session (``build_session``, as on EMR Serverless, where nothing else
    sets it) is given: the refusals above hold there too."""
    from shardlog.spark.session import JOB_CONF, build_session

    try:
        for key in JOB_CONF:  # as a session the service configured: Spark's defaults
            spark.conf.unset(key)
        assert spark.conf.get("spark.sql.legacy.timeParserPolicy") == "EXCEPTION"
        session = build_session("test-job")
        assert {key: session.conf.get(key) for key in JOB_CONF} == JOB_CONF
    finally:
        for key, value in JOB_CONF.items():
            spark.conf.set(key, value)
