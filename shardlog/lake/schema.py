"""The lake table's shape, declared once: its columns, partitioning and sort order.

A table's shape is a value (``TableSchema``): a tuple of ``Column`` specs (name, Iceberg
type, required, doc, Iceberg field id), the identifier columns, one partition transform and
the sort columns. Every other shape of the table is derived from it, never written again:

- the Iceberg schema, partition spec and sort order the catalog creates the table with;
- the Arrow schema of the data files and of query results (``ARROW_TYPES``);
- the Spark schema of the jobs (a DDL string, or a ``StructType``);
- the check that an existing table is the declared one (``TableSchema.check``);
- the column lists of file writing (``shardlog.lake.files``: a mapper per column fills it
  from a segment) and of queries and their JSON rows (``shardlog.lake.query``).

So a new column is one edit here plus its mapper in ``shardlog.lake.files``. A declaration
is checked when it is made (unique names and field ids, identifiers and partition and sort
columns declared and required, a type every derived shape has), so a bad one fails at
import, naming the column.

``EVENTS`` is the raw table: one row per committed log record. ``(partition_id, seq)``
identifies it (Iceberg identifier fields); ``committed_at`` is the segment's
``written_at_ms`` (docs/SPARK.md, ingest delay).

**Partitioned by arrival day** (``day(arrival_time)``), not hour: a scheduled compaction
appends a few minutes of records per run, so hourly partitions would hold one small file
per partition per run and Athena would plan 24x more partitions for a range query. Day
partitions keep files fewer and larger; an hour filter still skips files through the
per-file min/max of ``arrival_time`` that Iceberg keeps in its manifests. Iceberg's
partitioning is hidden, so a busier deployment can move to ``hour`` by partition
evolution, without rewriting data or changing a query.

**Sorted by partition id, then seq**: the log's own order, so a partition's range reads
from few row groups, and a file's seq range (its min/max stats) equals its batch.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import DayTransform, IdentityTransform, Transform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from shardlog.lake.exceptions import LakeSchemaError

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql.types import DataType as SparkType
    from pyspark.sql.types import StructType as SparkStruct

UTC_MICROS = pa.timestamp("us", tz="UTC")
# Each Iceberg type a column may have, as Arrow and as Spark's DDL name it. Plain (not
# large) Arrow strings and binaries: what Spark's mapInArrow and pyiceberg's add_files take.
ARROW_TYPES: dict[type[IcebergType], pa.DataType] = {
    StringType: pa.string(),
    BinaryType: pa.binary(),
    BooleanType: pa.bool_(),
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    FloatType: pa.float32(),
    DoubleType: pa.float64(),
    DateType: pa.date32(),
    TimestampType: pa.timestamp("us"),
    TimestamptzType: UTC_MICROS,
}
# Spark's type names (``DataType.typeName()``), which its DDL parser also takes.
SPARK_TYPES: dict[type[IcebergType], str] = {
    StringType: "string",
    BinaryType: "binary",
    BooleanType: "boolean",
    IntegerType: "integer",
    LongType: "long",
    FloatType: "float",
    DoubleType: "double",
    DateType: "date",
    TimestampType: "timestamp_ntz",
    TimestamptzType: "timestamp",
}


def is_supported(kind: IcebergType) -> bool:
    """Whether every derived shape has this type: a primitive of ``ARROW_TYPES``, a
    decimal, or a struct or list of supported types (the typed tables' nested columns)."""
    if isinstance(kind, StructType):
        return all(is_supported(f.field_type) for f in kind.fields)
    if isinstance(kind, ListType):
        return is_supported(kind.element_type)
    return isinstance(kind, DecimalType) or type(kind) in ARROW_TYPES


def arrow_type(kind: IcebergType) -> pa.DataType:
    """The Arrow type of an Iceberg type (nested fields nullable unless required)."""
    if isinstance(kind, StructType):
        return pa.struct(
            [pa.field(f.name, arrow_type(f.field_type), not f.required) for f in kind.fields]
        )
    if isinstance(kind, ListType):
        element = pa.field("element", arrow_type(kind.element_type), not kind.element_required)
        return pa.list_(element)
    if isinstance(kind, DecimalType):
        return pa.decimal128(kind.precision, kind.scale)
    return ARROW_TYPES[type(kind)]


def spark_type(kind: IcebergType) -> str:
    """The Spark DDL of an Iceberg type (``struct<a:long>``, ``array<string>``, ...)."""
    if isinstance(kind, StructType):
        return f"struct<{','.join(f'{f.name}:{spark_type(f.field_type)}' for f in kind.fields)}>"
    if isinstance(kind, ListType):
        return f"array<{spark_type(kind.element_type)}>"
    if isinstance(kind, DecimalType):
        return f"decimal({kind.precision},{kind.scale})"
    return SPARK_TYPES[type(kind)]


def holds(have: IcebergType, want: IcebergType) -> bool:
    """Whether a table's type ``have`` is the declared ``want``: the same names, types and
    nullability at every level, in any order, nested field ids aside (schema evolution
    numbers and orders an added field otherwise than a table created with it); a struct
    may have more fields if they are optional (a property no longer declared)."""
    if isinstance(have, StructType) and isinstance(want, StructType):
        found = {f.name: f for f in have.fields}
        wanted = {f.name for f in want.fields}
        return all(
            f.name in found
            and found[f.name].required == f.required
            and holds(found[f.name].field_type, f.field_type)
            for f in want.fields
        ) and not any(f.required for f in have.fields if f.name not in wanted)
    if isinstance(have, ListType) and isinstance(want, ListType):
        return have.element_required == want.element_required and holds(
            have.element_type, want.element_type
        )
    return have == want


# Iceberg numbers partition fields from 1000 (the spec's convention; column ids stay below).
FIRST_PARTITION_FIELD_ID = 1000
# A column name every engine takes unquoted (Spark DDL, Athena, pyiceberg, JSON in camelCase).
_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Column:
    """One column: its Iceberg field id (never reused: readers match files by it), name,
    Iceberg type, whether every row has a value, and what it holds."""

    field_id: int
    name: str
    kind: IcebergType
    required: bool
    doc: str

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise LakeSchemaError(
                f"column name {self.name!r}: lower case letters, digits and _, "
                "starting with a letter"
            )
        if self.field_id < 1 or self.field_id >= FIRST_PARTITION_FIELD_ID:
            raise LakeSchemaError(
                f"column {self.name}: field id must be 1..{FIRST_PARTITION_FIELD_ID - 1}, "
                f"not {self.field_id}"
            )
        if not is_supported(self.kind):
            known = ", ".join(str(kind()) for kind in ARROW_TYPES)
            raise LakeSchemaError(
                f"column {self.name}: type {self.kind} is not one of {known}, "
                "decimal, or a struct or list of them"
            )

    @property
    def arrow_type(self) -> pa.DataType:
        return arrow_type(self.kind)

    @property
    def spark_type(self) -> str:
        return spark_type(self.kind)

    @property
    def json_name(self) -> str:
        """The name in JSON rows (camelCase, like the rest of shardlog's JSON)."""
        head, *rest = self.name.split("_")
        return head + "".join(word.capitalize() for word in rest)


@dataclass(frozen=True)
class PartitionBy:
    """The table's partition: a transform of one column, under its own name."""

    column: str
    transform: Transform[Any, Any]
    name: str


@dataclass(frozen=True)
class TableSchema:
    """A lake table's shape, declared once; every other shape derived from it."""

    columns: tuple[Column, ...]
    identifier: tuple[str, ...]
    partition: PartitionBy
    sort_by: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        problems = _duplicates("column name", [c.name for c in self.columns])
        problems += _duplicates("field id", [c.field_id for c in self.columns])
        by_name = {c.name: c for c in self.columns}
        uses = [("identifier", n) for n in self.identifier]
        uses += [("partition", self.partition.column)]
        uses += [("sort", n) for n in self.sort_by]
        for role, name in uses:
            column = by_name.get(name)
            if column is None:
                problems.append(f"{role} column {name} is not declared")
            elif not column.required:
                problems.append(f"{role} column {name} must be required")
        if problems:
            raise LakeSchemaError(f"table schema refused: {'; '.join(problems)}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        for column in self.columns:
            if column.name == name:
                return column
        raise LakeSchemaError(f"no column {name} in {', '.join(self.names)}")

    def with_column(self, column: Column) -> TableSchema:
        """This shape with one more column (a copy: declarations are values)."""
        return TableSchema((*self.columns, column), self.identifier, self.partition, self.sort_by)

    def iceberg(self) -> Schema:
        return Schema(
            *(
                NestedField(c.field_id, c.name, c.kind, required=c.required, doc=c.doc)
                for c in self.columns
            ),
            identifier_field_ids=[self.column(n).field_id for n in self.identifier],
        )

    def partition_spec(self) -> PartitionSpec:
        return PartitionSpec(
            PartitionField(
                source_id=self.column(self.partition.column).field_id,
                field_id=FIRST_PARTITION_FIELD_ID,
                transform=self.partition.transform,
                name=self.partition.name,
            )
        )

    def sort_order(self) -> SortOrder:
        return SortOrder(
            *(
                SortField(source_id=self.column(n).field_id, transform=IdentityTransform())
                for n in self.sort_by
            )
        )

    def arrow(self) -> pa.Schema:
        return pa.schema(
            [pa.field(c.name, c.arrow_type, nullable=not c.required) for c in self.columns]
        )

    def spark_ddl(self) -> str:
        """The Spark schema as DDL (what ``createDataFrame`` and ``mapInArrow`` take). Every
        field nullable, as Spark reads Arrow batches."""
        return ", ".join(f"{c.name} {c.spark_type}" for c in self.columns)

    def spark_struct(self) -> SparkStruct:
        """The same Spark schema as a ``StructType`` (pyspark imported only here)."""
        from pyspark.sql.types import StructField

        return _spark_struct_type(
            [StructField(c.name, _spark_data_type(c.kind)) for c in self.columns]
        )

    def check(self, found: Schema, identifier: str) -> None:
        """Refuse a table whose columns are not these (name, type, required), by name. A
        table may have more columns, if they are optional (added by another engine)."""
        expected = {c.name: c for c in self.columns}
        actual = {f.name: f for f in found.fields}
        problems = []
        for name, want in expected.items():
            have = actual.get(name)
            if have is None:
                problems.append(f"missing column {name}")
            elif not holds(have.field_type, want.kind) or have.required != want.required:
                problems.append(
                    f"column {name} is {have.field_type}{' required' if have.required else ''}, "
                    f"expected {want.kind}{' required' if want.required else ''}"
                )
        problems += [
            f"unexpected required column {n}"
            for n in actual.keys() - expected.keys()
            if actual[n].required
        ]
        if problems:
            raise LakeSchemaError(
                f"table {identifier} is not a shardlog lake table: {'; '.join(sorted(problems))}"
            )


def _spark_struct_type(fields: list[Any]) -> SparkStruct:
    from pyspark.sql import types

    return types.StructType(fields)


def _spark_data_type(kind: IcebergType) -> SparkType:
    """Spark's ``DataType`` of an Iceberg type, nested ones too (every field nullable)."""
    from pyspark.sql import types

    if isinstance(kind, StructType):
        return types.StructType(
            [types.StructField(f.name, _spark_data_type(f.field_type)) for f in kind.fields]
        )
    if isinstance(kind, ListType):
        return types.ArrayType(_spark_data_type(kind.element_type))
    if isinstance(kind, DecimalType):
        return types.DecimalType(kind.precision, kind.scale)
    primitives = (
        types.StringType,
        types.BinaryType,
        types.BooleanType,
        types.IntegerType,
        types.LongType,
        types.FloatType,
        types.DoubleType,
        types.DateType,
        types.TimestampType,
        types.TimestampNTZType,
    )
    by_name = {primitive.typeName(): primitive for primitive in primitives}
    return by_name[SPARK_TYPES[type(kind)]]()


def _duplicates(what: str, values: Sequence[object]) -> list[str]:
    return [f"{what} {v} declared {n} times" for v, n in Counter(values).items() if n > 1]


EVENTS = TableSchema(
    columns=(
        Column(1, "partition_id", StringType(), True, "the log partition (Kinesis shard id)"),
        Column(2, "seq", LongType(), True, "position in the partition: 0, 1, 2, ... dense"),
        Column(3, "partition_key", StringType(), True, "the Kinesis partition key"),
        Column(4, "data", BinaryType(), True, "the record's bytes"),
        Column(
            5, "kinesis_sequence_number", StringType(), True, "up to 128 digits: compare as numbers"
        ),
        Column(6, "arrival_time", TimestamptzType(), True, "Kinesis approximate arrival time"),
        Column(7, "committed_at", TimestamptzType(), True, "when the writer committed its segment"),
        Column(8, "record_id", StringType(), False, "the producer's id of an idempotent produce"),
    ),
    identifier=("partition_id", "seq"),
    partition=PartitionBy("arrival_time", DayTransform(), "arrival_day"),
    sort_by=("partition_id", "seq"),
)
