"""Declared lake tables (``shardlog.lake.declared``): the declaration model at and past each
limit, one error naming the field, and the typed and dead-letter tables' derived shapes."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.schema import assign_fresh_schema_ids
from pyiceberg.types import DecimalType, ListType, StructType

from shardlog.lake.catalog import open_table
from shardlog.lake.commit import LakeAppend, append, table_watermarks
from shardlog.lake.declared import (
    LOG_COLUMNS,
    MAX_COLUMNS,
    MAX_DEPTH,
    MAX_NAME_LENGTH,
    MAX_TABLES,
    LakeDeclarationError,
    column_name,
    parse_lake_tables,
    rejected_schema,
)
from shardlog.lake.files import parquet_bytes
from shardlog.lake.query import LakeQuery, json_rows, query_table, where
from shardlog.lake.schema import EVENTS
from tests.unit.test_lake_schema import sql_catalog_table

SOURCE = "shardlog:lakeTables"


def table(name: str = "orders", **schema: Any) -> dict[str, Any]:
    payload = {"type": "object", "properties": {"orderId": {"type": "string"}}, **schema}
    return {"name": name, "schema": payload}


def refused(data: object, message: str) -> None:
    with pytest.raises(LakeDeclarationError, match=message):
        parse_lake_tables(data, SOURCE)


ORDERS = {
    "name": "orders",
    "schema": {
        "type": "object",
        "required": ["orderId", "amount"],
        "properties": {
            "orderId": {"type": "string"},
            "amount": {"type": "string", "format": "decimal", "precision": 10, "scale": 2},
            "quantity": {"type": "integer", "minimum": 1, "maximum": 100},
            "placedAt": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "gift": {"type": "boolean"},
            "weight": {"type": "number"},
            "address": {
                "type": "object",
                "required": ["country"],
                "properties": {"country": {"type": "string"}, "zipCode": {"type": "string"}},
            },
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    },
    "filter": {"partitionKeyPrefix": "order-", "field": "kind", "equals": "order"},
}


def test_a_declaration_gives_the_typed_table_with_the_logs_own_columns_first() -> None:
    (orders,) = parse_lake_tables([ORDERS], SOURCE).tables
    typed = orders.typed_schema()
    assert typed.names == (
        *LOG_COLUMNS,
        "order_id",
        "amount",
        "quantity",
        "placed_at",
        "day",
        "gift",
        "weight",
        "address",
        "tags",
    )
    for name in LOG_COLUMNS:  # the log's columns as the raw table declares them
        assert typed.column(name).kind == EVENTS.column(name).kind
        assert typed.column(name).required == EVENTS.column(name).required
    assert typed.column("amount").kind == DecimalType(10, 2)
    assert not any(typed.column(n).required for n in typed.names[len(LOG_COLUMNS) :])
    address = typed.column("address").kind
    assert isinstance(address, StructType)
    assert [f.name for f in address.fields] == ["country", "zip_code"]
    assert isinstance(typed.column("tags").kind, ListType)
    assert typed.arrow().field("amount").type == pa.decimal128(10, 2)
    assert "address struct<country:string,zip_code:string>" in typed.spark_ddl()
    assert "tags array<string>" in typed.spark_ddl()
    # pyiceberg renumbers a created table's fields: the declared ids already are its ids,
    # so the table a catalog creates passes the shape check.
    assert assign_fresh_schema_ids(typed.iceberg()) == typed.iceberg()
    assert orders.rejected_name == "orders_rejected"
    assert orders.filter is not None and orders.filter.equals_text == "order"


def test_the_dead_letter_table_keeps_the_error_and_the_raw_bytes() -> None:
    assert rejected_schema().names == (*LOG_COLUMNS, "error_field", "error_reason", "data")
    assert rejected_schema().column("data").kind == EVENTS.column("data").kind
    assert rejected_schema().identifier == EVENTS.identifier == ("partition_id", "seq")


@pytest.mark.parametrize(
    ("key", "column"),
    [("userId", "user_id"), ("user_id", "user_id"), ("a", "a"), ("zipCode2", "zip_code2")],
)
def test_property_names_become_snake_case_columns(key: str, column: str) -> None:
    assert column_name(key) == column


def test_no_declaration_is_no_table() -> None:
    assert parse_lake_tables(None, SOURCE).tables == ()
    assert parse_lake_tables([], SOURCE).tables == ()


def test_table_count_at_and_past_the_limit() -> None:
    many = [table(f"t{i}") for i in range(MAX_TABLES)]
    assert len(parse_lake_tables(many, SOURCE).tables) == MAX_TABLES
    refused([*many, table("one_more")], f"{SOURCE}: Tuple should have at most {MAX_TABLES}")


def test_table_name_length_at_and_past_the_limit() -> None:
    assert parse_lake_tables([table("a" * MAX_NAME_LENGTH)], SOURCE).tables
    refused(
        [table("a" * (MAX_NAME_LENGTH + 1))], rf"{SOURCE}\[0\]\.name: String should have at most"
    )


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Orders", "lower case letters"),
        ("9orders", "lower case letters"),
        ("events", "taken"),
        ("orders_rejected", "taken"),
    ],
)
def test_table_names_refused(name: str, message: str) -> None:
    refused([table(name)], rf"{SOURCE}\[0\]\.name: .*{message}")


def test_a_table_declared_twice_is_refused() -> None:
    refused([table("a"), table("a")], r"tables \['a'\] are declared more than once")


def test_column_count_at_and_past_the_limit() -> None:
    def wide(n: int) -> dict[str, Any]:
        return table(properties={f"p{i}": {"type": "string"} for i in range(n)})

    assert parse_lake_tables([wide(MAX_COLUMNS)], SOURCE).tables
    refused(
        [wide(MAX_COLUMNS + 1)],
        rf"{SOURCE}\[0\]: .*{MAX_COLUMNS + 1} fields .* at most {MAX_COLUMNS}",
    )


def test_nesting_depth_at_and_past_the_limit() -> None:
    def nested(depth: int) -> dict[str, Any]:
        node: dict[str, Any] = {"type": "string"}
        for _ in range(depth - 1):
            node = {"type": "object", "properties": {"inner": node}}
        return table(properties={"outer": node})

    assert parse_lake_tables([nested(MAX_DEPTH)], SOURCE).tables  # the payload object + 4
    refused([nested(MAX_DEPTH + 1)], f"nested {MAX_DEPTH + 1} deep, at most {MAX_DEPTH}")


@pytest.mark.parametrize(
    ("precision", "scale", "accepted"),
    [(1, 0, True), (38, 38, True), (38, 0, True), (39, 2, False), (0, 0, False), (10, 11, False)],
)
def test_decimal_precision_and_scale_at_and_past_their_limits(
    precision: int, scale: int, accepted: bool
) -> None:
    data = [
        table(
            properties={
                "amount": {
                    "type": "number",
                    "format": "decimal",
                    "precision": precision,
                    "scale": scale,
                }
            }
        )
    ]
    if accepted:
        (declared,) = parse_lake_tables(data, SOURCE).tables
        assert declared.typed_schema().column("amount").kind == DecimalType(precision, scale)
    else:
        refused(data, rf"{SOURCE}\[0\]\.schema\.properties\.amount")


@pytest.mark.parametrize(
    ("node", "message"),
    [
        ({"type": "uuid"}, r"properties\.p\.type: Input should be"),
        ({"type": "string", "format": "decimal"}, "needs precision"),
        ({"type": "integer", "format": "date-time"}, "format date-time is a string's"),
        ({"type": "string", "minimum": 1}, "minimum/maximum bound an integer or a number"),
        ({"type": "array"}, "an array needs items"),
        ({"type": "string", "items": {"type": "string"}}, "an array needs items"),
        ({"type": "object"}, "an object needs at least one property"),
        ({"type": "object", "properties": {"a-b": {"type": "string"}}}, "are not"),
        (
            {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]},
            "not among",
        ),
        (
            {"type": "object", "properties": {"aB": {"type": "string"}, "a_b": {"type": "string"}}},
            "both column a_b",
        ),
        ({"type": "string", "enum": ["x"]}, r"properties\.p\.enum: Extra inputs are not permitted"),
    ],
)
def test_each_malformed_shape_is_refused_naming_its_field(
    node: dict[str, Any], message: str
) -> None:
    refused([table(properties={"p": node})], message)


def test_the_payload_is_an_object_without_the_logs_column_names() -> None:
    refused([{"name": "t", "schema": {"type": "string"}}], "payload is an object")
    refused([table(properties={"partitionKey": {"type": "string"}})], "the log's own columns")


@pytest.mark.parametrize(
    ("record_filter", "message"),
    [
        ({}, "needs partitionKeyPrefix, or field and equals"),
        ({"field": "kind"}, "field and equals go together"),
        ({"field": "a..b", "equals": 1}, "not a property path"),
        ({"partitionKeyPrefix": ""}, "at least 1 character"),
        ({"partitionKeyPrefix": "x", "other": 1}, "Extra inputs"),
    ],
)
def test_malformed_filters_are_refused(record_filter: dict[str, Any], message: str) -> None:
    refused([{**table(), "filter": record_filter}], rf"{SOURCE}\[0\]\.filter.*{message}")


@pytest.mark.parametrize(
    ("equals", "text"), [("x", "x"), (True, "true"), (False, "false"), (7, "7")]
)
def test_a_field_filter_compares_the_json_text(equals: object, text: str) -> None:
    data = [{**table(), "filter": {"field": "order.kind", "equals": equals}}]
    (declared,) = parse_lake_tables(data, SOURCE).tables
    assert declared.filter is not None and declared.filter.equals_text == text


def test_declarations_round_trip_through_json() -> None:
    tables = parse_lake_tables([ORDERS], SOURCE)
    assert parse_lake_tables(tables.to_json(), SOURCE) == tables
    assert tables.table("orders_rejected").name == "orders"


def test_a_typed_table_in_a_catalog_holds_its_nested_values_and_moves_without_files(
    tmp_path: Path,
) -> None:
    """Created from the declaration in pyiceberg's SQL catalog, the typed table passes the
    shape check when opened again, its Parquet files (plain pyarrow, no field ids) read
    back by name, nested values too; and an append of a range that holds none of its
    records moves its watermarks with no file."""
    (orders,) = parse_lake_tables([ORDERS], SOURCE).tables
    schema = orders.typed_schema()
    lake = sql_catalog_table(tmp_path, "lake.orders")
    table = open_table(lake, create=True, schema=schema)
    open_table(lake, schema=schema)  # the created table is the declared one
    arrival = datetime(2026, 1, 1, tzinfo=UTC)
    row = {
        "partition_id": "shardId-0",
        "seq": 0,
        "partition_key": "k",
        "arrival_time": arrival,
        "record_id": None,
        "order_id": "o-1",
        "amount": Decimal("12.50"),
        "quantity": 3,
        "placed_at": arrival,
        "day": date(2026, 1, 1),
        "gift": True,
        "weight": 1.5,
        "address": {"country": "FR", "zip_code": None},
        "tags": ["a", "b"],
    }
    data_file = tmp_path / "typed.parquet"
    data_file.write_bytes(parquet_bytes(pa.Table.from_pylist([row], schema.arrow()), schema))
    append(table, LakeAppend({"shardId-0": (0, 1)}, [str(data_file)], "run-1"))
    assert table.refresh().scan().to_arrow().to_pylist() == [row]
    # `shardlog lake query --table orders --where ...`: filters on typed columns.
    for terms, rows in (
        (["order_id=o-1", "amount=12.5", "gift=true", "day=2026-01-01"], 1),
        (["quantity=4"], 0),
    ):
        found = query_table(table, LakeQuery(equals=where(schema, terms)), schema)
        assert found.num_rows == rows, terms
    [as_json] = json_rows(query_table(table, LakeQuery(), schema), schema)
    assert (as_json["orderId"], as_json["amount"]) == ("o-1", "12.50")  # exact, as text

    committed = append(table, LakeAppend({"shardId-0": (1, 5)}, [], "run-2", watermarks_only=True))
    assert committed.watermarks == {"shardId-0": 5} == table_watermarks(table.refresh())
    assert table.scan().to_arrow().num_rows == 1
    with pytest.raises(ValueError, match="an append without files"):
        append(table, LakeAppend({"shardId-0": (5, 6)}, [], "run-3"))


@pytest.mark.parametrize(
    ("term", "message"),
    [
        ("order_id", "COLUMN=VALUE"),
        ("nowhere=1", "no column nowhere"),
        ("quantity=three", "not a long"),
        ("gift=yes", "true or false"),
        ("amount=x", "not a decimal"),
        ("address=x", "not a scalar column"),
    ],
)
def test_where_terms_are_refused_naming_the_term(term: str, message: str) -> None:
    (orders,) = parse_lake_tables([ORDERS], SOURCE).tables
    with pytest.raises(ValueError, match=message):
        where(orders.typed_schema(), [term])
