"""Declared lake tables: typed tables over the log's JSON payloads, and their dead-letter tables.

A declaration (``LakeTableDeclaration``) names a table, the shape of its records' payloads
(a subset of JSON Schema) and optionally which records are its (``RecordFilter``). It is
made in cdk.json (``shardlog:lakeTables``) or, for local runs, in a file
``shardlog local up --lake-tables FILE`` reads: a JSON array of declarations, parsed and
checked here (``parse_lake_tables``) into one clear error naming the field and the limit.

Every other shape derives from a declaration, through ``shardlog.lake.schema.TableSchema``
(the one place the raw table ``events`` is declared too):

- the **typed table** ``<database>.<name>`` (``typed_schema``): the log's own columns, as
  ``events`` declares them (``partition_id``, ``seq``, ``partition_key``, ``arrival_time``,
  ``record_id``), then one column per top-level property of the payload, named in
  snake_case (``userId`` -> ``user_id``; nested objects' fields too);
- the **dead-letter table** ``<database>.<name>_rejected`` (``rejected_schema``): the log's own
  columns, the first error (``error_field``, ``error_reason``) and the raw ``data``.

Type mapping (JSON Schema -> Iceberg): ``string`` -> string; ``string`` with ``format``
``date-time`` -> timestamptz, ``date`` -> date; ``integer`` -> long; ``number`` -> double;
``string`` or ``number`` with ``format: decimal``, ``precision`` and ``scale`` ->
decimal(p, s); ``boolean`` -> boolean; ``object`` with ``properties`` -> struct;
``array`` with ``items`` -> list. ``minimum`` / ``maximum`` bound integers and numbers.

``required`` is a validation rule, not Iceberg nullability: a record missing a required
property goes to the dead-letter table, so the typed table never holds it; the typed
columns are optional in Iceberg so that a later, optional column can be added (schema
evolution) without rewriting a file.

**Mode** (``mode``): ``append`` (the default) keeps every record; ``upsert`` keeps the newest
record per ``key``: ``partitionKey`` (the record's partition key) or a property path of the
schema (``orderId``, ``customer.id``) whose every step is ``required`` and whose leaf is a
``string`` or an ``integer`` without a format (a record lacking its key is refused to the
dead-letter table like any missing required property). An upsert table has one more column,
``log_clock`` (``UPSERT_COLUMNS``): the record's place in the log's order across partitions
(``shardlog.lake.upsert``). ``key`` without ``upsert``, or ``upsert`` without ``key``, is
refused naming ``key``.

Limits (each refused at and past its edge, naming the field): at most ``MAX_TABLES``
tables; a name of 1..``MAX_NAME_LENGTH`` characters of ``[a-z][a-z0-9_]*``, not ``events``
and not ending in ``_rejected`` (the dead-letter tables' names); property names of
``[A-Za-z][A-Za-z0-9_]*`` up to ``MAX_NAME_LENGTH``; at most ``MAX_COLUMNS`` fields per
table counting nested ones; objects and arrays nested ``MAX_DEPTH`` deep at most;
decimals of precision 1..38, scale 0..precision.

The model needs no pyiceberg (the CDK app and the local runtime check declarations
without the Spark extra); the derived shapes import it when asked for.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from shardlog.lake.exceptions import LakeSchemaError

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.types import IcebergType

    from shardlog.lake.schema import TableSchema

MAX_TABLES = 20
MAX_NAME_LENGTH = 64
MAX_COLUMNS = 200  # fields of a table, nested ones counted: Iceberg field ids stay < 1000
MAX_DEPTH = 5  # objects and arrays within objects and arrays
MAX_DECIMAL_PRECISION = 38  # Iceberg's, Spark's and Athena's limit
REJECTED_SUFFIX = "_rejected"
RAW_TABLE = "events"
# The log's own columns in a typed or dead-letter table, as ``events`` declares them.
LOG_COLUMNS = ("partition_id", "seq", "partition_key", "arrival_time", "record_id")
_TABLE_NAME = re.compile(r"[a-z][a-z0-9_]*")
_PROPERTY_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
PARTITION_KEY = "partitionKey"  # an upsert table keyed by the record's partition key
# What an upsert table has beyond a typed table's columns (shardlog.lake.upsert).
LOG_CLOCK = "log_clock"
UPSERT_COLUMNS = (LOG_CLOCK,)
_FIELD_PATH = re.compile(r"[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)*")


def column_name(key: str) -> str:
    """A JSON property's column name: snake_case (``userId`` -> ``user_id``)."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", key).lower()


class JsonField(BaseModel):
    """One node of a payload's shape: a JSON Schema subset (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["object", "array", "string", "integer", "number", "boolean"]
    format: Literal["date-time", "date", "decimal"] | None = None
    precision: int | None = Field(default=None, ge=1, le=MAX_DECIMAL_PRECISION)
    scale: int | None = Field(default=None, ge=0, le=MAX_DECIMAL_PRECISION)
    properties: dict[str, JsonField] = Field(default_factory=dict)
    required: tuple[str, ...] = ()
    items: JsonField | None = None
    minimum: StrictInt | StrictFloat | None = None
    maximum: StrictInt | StrictFloat | None = None
    description: str = Field(default="", max_length=1000)

    @model_validator(mode="after")
    def _consistent(self) -> JsonField:
        self._check_format()
        self._check_object()
        if (self.items is not None) != (self.type == "array"):
            raise ValueError("items: an array needs items, and only an array has them")
        if (self.minimum is not None or self.maximum is not None) and self.type not in (
            "integer",
            "number",
        ):
            raise ValueError(f"minimum/maximum bound an integer or a number, not a {self.type}")
        return self

    def _check_format(self) -> None:
        if self.format in ("date-time", "date") and self.type != "string":
            raise ValueError(f"format {self.format} is a string's, not a {self.type}'s")
        if self.format == "decimal":
            if self.type not in ("string", "number"):
                raise ValueError(f"format decimal is a string's or number's, not a {self.type}'s")
            if self.precision is None or self.scale is None:
                raise ValueError("format decimal needs precision (1..38) and scale (0..precision)")
            if self.scale > self.precision:
                raise ValueError(f"scale {self.scale} is above the precision {self.precision}")
        elif self.precision is not None or self.scale is not None:
            raise ValueError("precision and scale belong to format decimal")

    def _check_object(self) -> None:
        if self.type != "object":
            if self.properties or self.required:
                raise ValueError(f"properties and required belong to an object, not a {self.type}")
            return
        if not self.properties:
            raise ValueError("properties: an object needs at least one property")
        bad = [k for k in self.properties if not _name_ok(_PROPERTY_NAME, k)]
        if bad:
            raise ValueError(
                f"properties: names {bad} are not [A-Za-z][A-Za-z0-9_]* of at most "
                f"{MAX_NAME_LENGTH} characters"
            )
        unknown = [k for k in self.required if k not in self.properties]
        if unknown:
            raise ValueError(f"required: {unknown} are not among the properties")
        columns: dict[str, str] = {}
        for key in self.properties:
            if column_name(key) in columns:
                raise ValueError(
                    f"properties: {columns[column_name(key)]} and {key} are both column "
                    f"{column_name(key)}"
                )
            columns[column_name(key)] = key

    def iceberg(self, ids: Iterator[int]) -> IcebergType:
        """This node's Iceberg type; ``ids`` numbers nested fields (placeholders: the table's
        schema is renumbered as pyiceberg numbers a created table's)."""
        from pyiceberg.types import DecimalType, ListType, NestedField, StructType

        if self.type == "object":
            return StructType(
                *(
                    NestedField(next(ids), column_name(k), p.iceberg(ids), required=False)
                    for k, p in self.properties.items()
                )
            )
        if self.type == "array":
            assert self.items is not None  # checked above
            return ListType(next(ids), self.items.iceberg(ids), element_required=False)
        if self.format == "decimal":
            assert self.precision is not None and self.scale is not None  # checked above
            return DecimalType(self.precision, self.scale)
        return _scalars()[(self.type, self.format)]

    def fields(self) -> int:
        """Fields below this node (properties and list elements, nested ones counted)."""
        below = [*self.properties.values(), *([self.items] if self.items else [])]
        return sum(1 + node.fields() for node in below)

    def depth(self) -> int:
        """Objects and arrays nested below this node, this one counted."""
        below = [*self.properties.values(), *([self.items] if self.items else [])]
        nested = self.type in ("object", "array")
        return int(nested) + max((node.depth() for node in below), default=0)


@cache
def _scalars() -> dict[tuple[str, str | None], IcebergType]:
    from pyiceberg import types

    return {
        ("string", None): types.StringType(),
        ("string", "date-time"): types.TimestamptzType(),
        ("string", "date"): types.DateType(),
        ("integer", None): types.LongType(),
        ("number", None): types.DoubleType(),
        ("boolean", None): types.BooleanType(),
    }


class RecordFilter(BaseModel):
    """Which records are the table's: a partition key prefix, a JSON field's value, or both
    (a record must match each one given). A record whose payload a field filter cannot read
    (not a JSON object) is not the table's."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    partition_key_prefix: str | None = Field(
        default=None, alias="partitionKeyPrefix", min_length=1, max_length=256
    )
    field: str | None = Field(default=None, max_length=256)
    equals: StrictStr | StrictBool | StrictInt | StrictFloat | None = None

    @field_validator("field")
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        if value is not None and not _FIELD_PATH.fullmatch(value):
            raise ValueError(f"{value!r} is not a property path like status or order.status")
        return value

    @model_validator(mode="after")
    def _complete(self) -> RecordFilter:
        if (self.field is None) != (self.equals is None):
            raise ValueError("field and equals go together")
        if self.field is None and self.partition_key_prefix is None:
            raise ValueError("a filter needs partitionKeyPrefix, or field and equals")
        return self

    @property
    def equals_text(self) -> str | None:
        """The value as Spark's ``get_json_object`` returns a matching one."""
        if self.equals is None or isinstance(self.equals, str):
            return self.equals
        return (
            "true" if self.equals is True else "false" if self.equals is False else str(self.equals)
        )


class LakeTableDeclaration(BaseModel):
    """A typed table: its name, its payloads' shape (an ``object``), its record filter."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    payload: JsonField = Field(alias="schema")
    filter: RecordFilter | None = None
    description: str = Field(default="", max_length=1000)
    mode: Literal["append", "upsert"] = "append"
    key: str | None = Field(default=None, min_length=1, max_length=256)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _TABLE_NAME.fullmatch(value):
            raise ValueError(f"{value!r}: lower case letters, digits and _, starting with a letter")
        if value == RAW_TABLE or value.endswith(REJECTED_SUFFIX):
            raise ValueError(
                f"{value!r} is taken: {RAW_TABLE} is the raw table and *{REJECTED_SUFFIX} "
                "the dead-letter tables"
            )
        return value

    @model_validator(mode="after")
    def _within_limits(self) -> LakeTableDeclaration:
        if self.payload.type != "object":
            raise ValueError(f"schema: a table's payload is an object, not a {self.payload.type}")
        taken = [k for k in self.payload.properties if column_name(k) in LOG_COLUMNS]
        if taken:
            raise ValueError(f"schema: properties {taken} are the log's own columns {LOG_COLUMNS}")
        self._check_key()
        if self.payload.fields() > MAX_COLUMNS:
            raise ValueError(
                f"schema: {self.payload.fields()} fields (nested ones counted), "
                f"at most {MAX_COLUMNS}"
            )
        if self.payload.depth() > MAX_DEPTH:
            raise ValueError(
                f"schema: objects and arrays nested {self.payload.depth()} deep, "
                f"at most {MAX_DEPTH}"
            )
        return self

    def _check_key(self) -> None:
        """``key`` with ``upsert`` only: the partition key, or a required path to a string or
        an integer of the schema (every record then has exactly one key value)."""
        if self.mode == "append":
            if self.key is not None:
                raise ValueError("key: only a table of mode upsert has a key")
            return
        if self.key is None:
            raise ValueError(
                f"key: mode upsert needs a key: {PARTITION_KEY} or a property path of the schema"
            )
        taken = [k for k in self.payload.properties if column_name(k) in UPSERT_COLUMNS]
        if taken:
            raise ValueError(f"schema: properties {taken} are an upsert table's {UPSERT_COLUMNS}")
        if self.key != PARTITION_KEY:
            _key_leaf(self.payload, self.key)

    @property
    def upsert(self) -> bool:
        return self.mode == "upsert"

    def key_column(self) -> tuple[str, ...]:
        """The key's column path in the typed table (``partition_key``, or the property
        path in snake_case: ``customer.id`` -> ``("customer", "id")``)."""
        if self.key is None or self.key == PARTITION_KEY:
            return ("partition_key",)
        return tuple(column_name(step) for step in self.key.split("."))

    def table_schema(self) -> TableSchema:
        """The table as created: ``typed_schema`` and, for an upsert table, ``log_clock``."""
        schema = self.typed_schema()
        if not self.upsert:
            return schema
        from pyiceberg.types import LongType

        from shardlog.lake.schema import Column

        next_id = max(c.field_id for c in schema.columns) + 1
        doc = "the record's place in the log's order across partitions (epoch ms)"
        return schema.with_column(Column(next_id, LOG_CLOCK, LongType(), True, doc))

    @property
    def rejected_name(self) -> str:
        return f"{self.name}{REJECTED_SUFFIX}"

    def typed_schema(self) -> TableSchema:
        """The typed table: the log's own columns, then the payload's, numbered as pyiceberg
        numbers a table it creates (top-level fields first, then nested ones)."""
        from pyiceberg.schema import Schema, assign_fresh_schema_ids
        from pyiceberg.types import NestedField

        from shardlog.lake.schema import EVENTS

        ids = iter(range(1, 10 * MAX_COLUMNS))
        log = [EVENTS.column(n) for n in LOG_COLUMNS]
        fields = [NestedField(next(ids), c.name, c.kind, c.required, c.doc) for c in log]
        fields += [
            NestedField(next(ids), column_name(k), p.iceberg(ids), False, _doc(k, p))
            for k, p in self.payload.properties.items()
        ]
        return _table(assign_fresh_schema_ids(Schema(*fields)))


def _key_leaf(payload: JsonField, path: str) -> JsonField:
    """The property ``path`` names: each step declared and ``required``, the leaf a string or
    an integer without a format; else one error naming ``key``."""
    if not _FIELD_PATH.fullmatch(path):
        raise ValueError(
            f"key: {path!r} is neither {PARTITION_KEY} nor a property path like orderId or "
            "customer.id"
        )
    node, where = payload, ""
    for step in path.split("."):
        if node.type != "object" or step not in node.properties:
            owner = where or "the payload"
            raise ValueError(f"key: {path} is not in the schema ({owner} has no property {step})")
        if step not in node.required:
            raise ValueError(
                f"key: {path}: {where + '.' if where else ''}{step} is not required "
                "(a record without its key could not be placed)"
            )
        node, where = node.properties[step], f"{where}.{step}" if where else step
    if node.type not in ("string", "integer") or node.format is not None:
        kind = f"{node.type} ({node.format})" if node.format else node.type
        raise ValueError(f"key: {path} is of type {kind}: a key is a string or an integer")
    return node


def _doc(key: str, node: JsonField) -> str:
    return node.description or f"payload property {key}"


def _name_ok(pattern: re.Pattern[str], name: str) -> bool:
    return bool(pattern.fullmatch(name)) and len(name) <= MAX_NAME_LENGTH


def _table(schema: Any) -> TableSchema:
    """A ``TableSchema`` of a pyiceberg schema's top-level fields, shaped as ``events``."""
    from shardlog.lake.schema import EVENTS, Column, TableSchema

    return TableSchema(
        columns=tuple(
            Column(f.field_id, f.name, f.field_type, f.required, f.doc or "") for f in schema.fields
        ),
        identifier=EVENTS.identifier,
        partition=EVENTS.partition,
        sort_by=EVENTS.sort_by,
    )


@cache
def rejected_schema() -> TableSchema:
    """The dead-letter table of every typed table: what was refused, why, and the bytes."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType

    from shardlog.lake.schema import EVENTS

    log = [EVENTS.column(n) for n in LOG_COLUMNS]
    return _table(
        Schema(
            *(NestedField(i, c.name, c.kind, c.required, c.doc) for i, c in enumerate(log, 1)),
            NestedField(6, "error_field", StringType(), True, "the property refused (a path)"),
            NestedField(7, "error_reason", StringType(), True, "why it was refused"),
            NestedField(8, "data", EVENTS.column("data").kind, True, "the record's bytes"),
        )
    )


class LakeTables(BaseModel):
    """Every declared table (``shardlog:lakeTables``; the local runtime's file)."""

    model_config = ConfigDict(frozen=True)

    tables: tuple[LakeTableDeclaration, ...] = Field(default=(), max_length=MAX_TABLES)

    @field_validator("tables")
    @classmethod
    def _unique(cls, tables: tuple[LakeTableDeclaration, ...]) -> tuple[LakeTableDeclaration, ...]:
        names = [t.name for t in tables]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"tables {twice} are declared more than once")
        return tables

    def table(self, name: str) -> LakeTableDeclaration:
        for declared in self.tables:
            if name in (declared.name, declared.rejected_name):
                return declared
        known = ", ".join(t.name for t in self.tables) or "none declared"
        raise LakeSchemaError(f"no declared lake table {name} ({known})")

    def to_json(self) -> list[dict[str, Any]]:
        return [t.model_dump(by_alias=True, exclude_defaults=True) for t in self.tables]


class LakeDeclarationError(LakeSchemaError):
    """A lake table declaration refused: names the field and the limit."""


def parse_lake_tables(data: object, source: str) -> LakeTables:
    """Declarations from JSON data (a list of tables), or one error naming each refused field
    as ``<source>[i].<path>``."""
    if data is None:
        return LakeTables()
    try:
        return LakeTables.model_validate({"tables": data})
    except ValidationError as exc:
        raise LakeDeclarationError(_describe(exc, source)) from exc


def _describe(exc: ValidationError, source: str) -> str:
    problems = []
    for error in exc.errors():
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"][1:])
        problems.append(f"{source}{where}: {error['msg'].removeprefix('Value error, ')}")
    return "lake tables refused: " + "; ".join(_unique_ordered(problems))


def _unique_ordered(items: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(items))
