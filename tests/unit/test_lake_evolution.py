"""Schema evolution's compatibility check (``shardlog.lake.evolution.plan_changes``): each
kind of declaration change against a table created from the declaration before it."""

from __future__ import annotations

from typing import Any

import pytest

from shardlog.lake.declared import parse_lake_tables
from shardlog.lake.evolution import LakeEvolutionError, plan_changes
from shardlog.lake.exceptions import LakeSchemaError
from shardlog.lake.schema import holds

BASE: dict[str, Any] = {
    "orderId": {"type": "string"},
    "n": {"type": "integer"},
    "ratio": {"type": "number"},
    "amount": {"type": "string", "format": "decimal", "precision": 10, "scale": 2},
    "address": {"type": "object", "properties": {"country": {"type": "string"}}},
    "tags": {"type": "array", "items": {"type": "string"}},
}


def declared(properties: dict[str, Any], required: tuple[str, ...] = ("orderId",)) -> Any:
    schema = {"type": "object", "required": list(required), "properties": properties}
    return parse_lake_tables([{"name": "orders", "schema": schema}], "test").tables[0]


def current() -> Any:
    return declared(BASE).typed_schema().iceberg()


def changes(properties: dict[str, Any], *, has_rows: bool = True, **kw: Any) -> list[str]:
    plan = plan_changes(current(), declared(properties, **kw), "db.orders", has_rows=has_rows)
    return [c.describe() for c in plan]


def test_the_same_declaration_changes_nothing() -> None:
    assert changes(BASE) == []


def test_an_optional_property_is_added_top_level_or_nested() -> None:
    assert changes({**BASE, "couponCode": {"type": "string"}}) == ["add coupon_code string"]
    address = {
        "type": "object",
        "properties": {"country": {"type": "string"}, "zip": {"type": "integer"}},
    }
    assert changes({**BASE, "address": address}) == ["add address.zip long"]


def test_a_decimal_widens_its_precision() -> None:
    wider = {**BASE["amount"], "precision": 12}
    assert changes({**BASE, "amount": wider}) == ["widen amount decimal(12, 2)"]


@pytest.mark.parametrize(
    ("field", "node", "reason"),
    [
        ("amount", {**BASE["amount"], "precision": 8}, "cannot become decimal(8, 2) (narrowing"),
        ("amount", {**BASE["amount"], "scale": 3}, "(a type change"),
        ("n", {"type": "string"}, "long cannot become string (a type change"),
        ("ratio", {"type": "integer"}, "double cannot become long (a type change"),
        ("address", {"type": "string"}, "cannot become string (a type change"),
        ("tags", {"type": "array", "items": {"type": "integer"}}, "tags.element: string cannot"),
    ],
)  # fmt: skip
def test_a_narrowed_or_changed_type_is_refused_naming_the_field(
    field: str, node: dict[str, Any], reason: str
) -> None:
    with pytest.raises(LakeEvolutionError, match="schema change refused") as refused:
        changes({**BASE, field: node})
    assert f"lake table db.orders: schema change refused: {field}" in str(refused.value)
    assert reason in str(refused.value)


def test_a_new_required_property_is_refused_on_a_table_with_rows_only() -> None:
    added = {**BASE, "couponCode": {"type": "string"}}
    with pytest.raises(LakeEvolutionError, match="coupon_code: a new property must be optional"):
        changes(added, required=("orderId", "couponCode"))
    assert changes(added, required=("orderId", "couponCode"), has_rows=False) == [
        "add coupon_code string"
    ]


def test_every_refused_field_is_named_in_one_error() -> None:
    with pytest.raises(LakeEvolutionError) as refused:
        changes({**BASE, "n": {"type": "string"}, "ratio": {"type": "boolean"}})
    assert "n: long cannot become string" in str(refused.value)
    assert "ratio: double cannot become boolean" in str(refused.value)


def test_a_property_no_longer_declared_keeps_its_column() -> None:
    fewer = {k: v for k, v in BASE.items() if k != "ratio"}
    assert changes(fewer) == []
    table = declared(BASE).typed_schema()
    assert all(holds(c.kind, c.kind) for c in table.columns)
    declared(fewer).typed_schema().check(table.iceberg(), "db.orders")  # extra optional column


def test_an_evolved_table_holds_the_declared_shape_whatever_its_field_ids() -> None:
    address = {
        "type": "object",
        "properties": {"zip": {"type": "integer"}, "country": {"type": "string"}},
    }
    wanted = declared({**BASE, "address": address}).typed_schema()
    old = declared(BASE).typed_schema().iceberg()
    # as evolution leaves it: zip appended to the struct, with a new id
    from pyiceberg.types import LongType, NestedField, StructType

    zip_code = NestedField(99, "zip", LongType())
    fields = [
        NestedField(f.field_id, f.name, StructType(*f.field_type.fields, zip_code))
        if f.name == "address" else f
        for f in old.fields
    ]  # fmt: skip
    from pyiceberg.schema import Schema

    wanted.check(Schema(*fields), "db.orders")
    with pytest.raises(LakeSchemaError, match="column address is"):
        wanted.check(old, "db.orders")  # not evolved yet: the nested field is missing
