"""Payloads parsed, typed and validated as DataFrame transforms: a declared table's rows.

``parse_payloads(records, declared)`` takes the log's records (the raw table's columns,
``shardlog.spark.io.RECORD_SCHEMA``, or only those it reads: the log's own and ``data``, as
the typed job gives them) and returns, per record, the typed table's columns
(``declared.typed_schema()``) plus four of its own, named with a leading ``_`` (no
property's column is):

- ``_data``: the record's bytes, for the dead-letter table;
- ``_matched``: whether the record is the table's (its ``RecordFilter``); the rest is
  neither typed nor rejected;
- ``_error_field``, ``_error_reason``: the first error of a record that is the table's but
  does not fit its schema (null for a record that fits). Such a record goes to the table's
  dead-letter table, never dropped.

How a payload is read, one object level at a time (the payload, then each nested object
from its own JSON text):

1. ``from_json(text, map<string,string>)``: the object's properties as JSON text (null: the
   text is not a JSON object: ``not a JSON object``). A property is present when its value
   is not JSON ``null``; a missing ``required`` property is an error;
2. ``from_json(text, struct<...>)`` with the declared types (Spark's JSON reader is strict:
   a string is not a number, a fraction is not an integer, an integer past 64 bits fails):
   the values. A property present in 1 but null here does not have its type; which one is
   found by reading each property alone (only for such records: the common case reads the
   text twice), so the error names the property, not a neighbour;
3. ``minimum`` / ``maximum`` and a decimal's scale (a value with more decimal places than
   the scale is refused, not rounded) are checked on the values.

A ``string`` column takes any JSON value as its text (a number as ``12``, an object as its
JSON); an array's elements are typed by the strict read (2), not checked one by one.
Every function here is pure (DataFrame in, DataFrame out); no I/O.

What a record costs: each level's two reads (1, 2) are columns of a projection of their
own (``_Reads``), one projection per nesting depth, and the first error is one more; the
typed columns and the error's field and reason take them from there. Written inline in one
projection, Spark's optimizer pushes every field access into a parse of its own
(``from_json(text, struct<a,b>).a`` becomes ``from_json(text, struct<a>).a``) and
evaluates the error once for its field and again for its reason: about twenty parses of
each payload instead of two. Spark keeps a projection whose non-trivial columns are used
more than once apart from the one above it, so each read is computed once per record; a
test counts the parses in the optimized plan. The per-property reads of step 2 stay inline,
in the branch taken only by a record with a suspect property.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shardlog.lake.declared import (
    LOG_COLUMNS,
    JsonField,
    LakeTableDeclaration,
    RecordFilter,
    column_name,
)
from shardlog.lake.schema import TableSchema, spark_type

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import Column, DataFrame

PAYLOAD = "(payload)"  # the error_field of a payload that is not a JSON object
DATA, MATCHED, ERROR_FIELD, ERROR_REASON = "_data", "_matched", "_error_field", "_error_reason"
# Decimal places a payload's decimal is compared at, to refuse one Spark would round.
_EXACT = "decimal(38,18)"


_ERROR = "__error"  # the first error's struct, between the reads and the result
_READ = "__read"  # the reads' columns: __read<depth>_<n>


@dataclass
class _Reads:
    """The JSON reads of every object level, each a column computed once per record: a
    level's reads at its nesting depth, each depth one projection over the one before (a
    nested object's text is a property of its parent's read)."""

    depths: list[dict[str, Column]] = field(default_factory=list)

    def add(self, depth: int, read: Column) -> Column:
        """A column holding ``read``, computed at ``depth``."""
        from pyspark.sql import functions as F

        while len(self.depths) <= depth:
            self.depths.append({})
        name = f"{_READ}{depth}_{len(self.depths[depth])}"
        self.depths[depth][name] = read
        return F.col(name)

    def columns(self, records: DataFrame) -> DataFrame:
        """``records`` with every read as a column, depth by depth."""
        for reads in self.depths:
            records = records.select("*", *(read.alias(name) for name, read in reads.items()))
        return records


@dataclass(frozen=True)
class _Level:
    """What one object level gives: its typed value (a struct of column names) and its
    errors, each a ``struct<field, reason>`` or null, in declaration order."""

    value: Column
    errors: list[Column]


def parse_payloads(records: DataFrame, declared: LakeTableDeclaration) -> DataFrame:
    """Each record with the typed table's columns and ``_data``, ``_matched``,
    ``_error_field`` and ``_error_reason`` (see the module docstring)."""
    from pyspark.sql import functions as F

    schema = declared.typed_schema()
    reads = _Reads()
    level = _object(F.col("data").cast("string"), declared.payload, "", reads, 0)
    typed = [
        level.value[column_name(key)]
        .cast(_spark_type(schema, column_name(key)))
        .alias(column_name(key))
        for key in declared.payload.properties
    ]
    parsed = reads.columns(records).select(
        *(F.col(c) for c in LOG_COLUMNS),
        *typed,
        F.col("data").alias(DATA),
        record_filter(declared.filter).alias(MATCHED),
        F.coalesce(*level.errors).alias(_ERROR),
    )
    return parsed.select(
        *(c for c in parsed.columns if c != _ERROR),
        F.col(_ERROR)["field"].alias(ERROR_FIELD),
        F.col(_ERROR)["reason"].alias(ERROR_REASON),
    )


def record_filter(declared: RecordFilter | None) -> Column:
    """Whether a record is the table's: each condition given must hold; a field filter on
    a payload that is not a JSON object does not."""
    from pyspark.sql import functions as F

    condition = F.lit(True)
    if declared is None:
        return condition
    if declared.partition_key_prefix is not None:
        condition &= F.col("partition_key").startswith(declared.partition_key_prefix)
    if declared.field is not None:
        value = F.get_json_object(F.col("data").cast("string"), f"$.{declared.field}")
        condition &= F.coalesce(value == F.lit(declared.equals_text), F.lit(False))
    return condition


def _spark_type(schema: TableSchema, name: str) -> str:
    return schema.column(name).spark_type


def _object(text: Column, shape: JsonField, path: str, reads: _Reads, depth: int) -> _Level:
    """One object level: its properties' values and errors, nested objects read from their
    own text (one depth further)."""
    from pyspark.sql import functions as F

    raw = reads.add(depth, F.from_json(text, "map<string,string>"))
    strict = reads.add(depth, F.from_json(text, _level_type(shape)))
    errors = [F.when(raw.isNull(), _error(path or PAYLOAD, F.lit("not a JSON object")))]
    values, mistyped = [], []
    for key, node in shape.properties.items():
        where = f"{path}.{key}" if path else key
        present = raw[key].isNotNull()
        if key in shape.required:
            errors.append(F.when(~present, _error(where, F.lit("required, missing"))))
        if node.type == "object":
            inner = _object(raw[key], node, where, reads, depth + 1)
            errors += [F.when(present, e) for e in inner.errors]
            values.append(F.when(present, inner.value).alias(column_name(key)))
            continue
        value = strict[key]
        values.append(value.alias(column_name(key)))
        alone = F.from_json(text, f"struct<`{key}`:{_read_type(node)}>")[key]
        mistyped.append((present & value.isNull(), present & alone.isNull(), where, node))
        errors += _value_errors(raw[key], value, node, where)
    if mistyped:
        suspect = F.coalesce(*(F.when(cond, F.lit(True)) for cond, *_ in mistyped), F.lit(False))
        wrong = [F.when(cond, _error(w, F.lit(f"not {_kind(n)}"))) for _, cond, w, n in mistyped]
        errors.insert(1, F.when(suspect, F.coalesce(*wrong)))
    return _Level(F.struct(*values), errors)


def _value_errors(raw: Column, value: Column, node: JsonField, where: str) -> list[Column]:
    """A typed value outside its bounds, or a decimal with more places than its scale."""
    from pyspark.sql import functions as F

    errors = []
    if node.minimum is not None:
        reason = F.concat(value.cast("string"), F.lit(f" is below the minimum {node.minimum}"))
        errors.append(F.when(value < F.lit(node.minimum), _error(where, reason)))
    if node.maximum is not None:
        reason = F.concat(value.cast("string"), F.lit(f" is above the maximum {node.maximum}"))
        errors.append(F.when(value > F.lit(node.maximum), _error(where, reason)))
    if node.format == "decimal":
        exact = raw.cast(_EXACT)
        reason = F.concat(raw, F.lit(f" has more than {node.scale} decimal places"))
        errors.append(F.when(exact != value.cast(_EXACT), _error(where, reason)))
    return errors


def _error(field: str, reason: Column) -> Column:
    from pyspark.sql import functions as F

    return F.struct(F.lit(field).alias("field"), reason.alias("reason"))


def _level_type(shape: JsonField) -> str:
    """The Spark type one object level is read as: its nested objects as their JSON text
    (each object level reads its own)."""
    props = ",".join(
        f"`{k}`:{'string' if p.type == 'object' else _read_type(p)}"
        for k, p in shape.properties.items()
    )
    return f"struct<{props}>"


def _read_type(node: JsonField) -> str:
    """The Spark type a node is read as: named as in the JSON (objects inside arrays as
    structs; ``parse_payloads`` casts them to the columns' names)."""
    if node.type == "object":
        props = ",".join(f"`{k}`:{_read_type(p)}" for k, p in node.properties.items())
        return f"struct<{props}>"
    if node.type == "array":
        assert node.items is not None
        return f"array<{_read_type(node.items)}>"
    return spark_type(node.iceberg(iter(())))


def _kind(node: JsonField) -> str:
    """How an error names a type."""
    if node.format == "decimal":
        return f"a decimal({node.precision},{node.scale})"
    if node.format is not None:
        return f"a {node.format} string"
    if node.type == "array":
        assert node.items is not None
        return f"an array of {_kind(node.items).removeprefix('a ').removeprefix('an ')}"
    return {"integer": "an integer (64-bit)", "number": "a number", "boolean": "a boolean"}.get(
        node.type, f"a {node.type}"
    )
