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

1. ``from_json(text, struct<...>)`` with the declared types (Spark's JSON reader is strict:
   a string is not a number, a fraction is not an integer, an integer past 64 bits fails,
   a day that does not exist fails), each nested object as its JSON text, each decimal at
   ``decimal(38,18)``, and ``_unparsed``: the text of a record the read refused, null for
   one it took whole. A property is present when its value is not JSON ``null`` (a key
   given twice: its last value); a missing ``required`` property is an error;
2. only for a refused record (``_unparsed``), which property is not of its type: the text
   as ``map<string,string>`` (null: ``not a JSON object``; else which properties are
   present) and each present property read alone with its type, so the error names the
   property, not a neighbour;
3. ``minimum`` / ``maximum``, a decimal's scale (a value with more decimal places than the
   scale is refused, not rounded) and its precision are checked on the values.

A ``string`` column takes any JSON value as its text (a number as ``12``, an object as its
JSON); an array's elements are typed by the strict read (1), not checked one by one.
Every function here is pure (DataFrame in, DataFrame out); no I/O.

What a record costs: one parse per object level it has. Each level's strict read is a
column of a projection of its own (``_Reads``), one projection per nesting depth, and the
first error is one more; the typed columns and the error's field and reason take them from
there. Written inline in one projection, Spark's optimizer pushes every field access into a
parse of its own (``from_json(text, struct<a,b>).a`` becomes ``from_json(text,
struct<a>).a``) and evaluates the error once for its field and again for its reason: about
twenty parses of each payload instead of two. Spark keeps a projection whose non-trivial
columns are used more than once apart from the one above it, so each read is computed once
per record. The reads of step 2 are one more column of the read's projection, in a
branch only a refused record takes; its condition repeats the read, which Spark's
subexpression elimination computes once for both columns, so the projections above it
hold no parse and Spark compiles them into one stage; a test counts the parses every
record pays in the optimized plan. (The map read was step 1 once, for
every record: 0.56x the raw compaction's records/s, against the typed job's 0.7x goal.)
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
# Where a level's strict read puts the text of a record it refused (no property's name
# starts with "_"); Spark keeps the values it could read (its partial results).
_UNPARSED = "_unparsed"
_UNPARSED_OPTION = {"columnNameOfCorruptRecord": _UNPARSED, "mode": "PERMISSIVE"}


_ERROR = "__error"  # the first error's struct, between the reads and the result
_READ = "__read"  # the reads' columns: __read<depth>_<n>


@dataclass
class _Reads:
    """The JSON reads of every object level, each a column computed once per record: a
    level's reads at its nesting depth, each depth one projection over the one before (a
    nested object's text is a property of its parent's read)."""

    gate: Column | None = None  # a record is parsed only where this holds
    depths: list[dict[str, Column]] = field(default_factory=list)

    def add(self, depth: int, read: Column) -> Column:
        """A column holding ``read``, computed at ``depth``."""
        from pyspark.sql import functions as F

        while len(self.depths) <= depth:
            self.depths.append({})
        name = f"{_READ}{depth}_{len(self.depths[depth])}"
        self.depths[depth][name] = read
        return F.col(name)

    def gated(self, text: Column) -> Column:
        """``text``, null for a record the gate leaves out (``from_json`` parses no null)."""
        from pyspark.sql import functions as F

        return text if self.gate is None else F.when(self.gate, text)

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
    reads, matched = _Reads(), F.lit(True)
    if declared.filter is not None:  # a record not the table's is not parsed
        matched = reads.gate = reads.add(0, record_filter(declared.filter))
    level = _object(F.col("data").cast("string"), declared.payload, "", reads, len(reads.depths))
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
        matched.alias(MATCHED),
        F.when(matched, F.coalesce(*level.errors)).alias(_ERROR),
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

    read = F.from_json(reads.gated(text), _level_type(shape), _UNPARSED_OPTION)
    strict = reads.add(depth, read)
    not_object = _error(path or PAYLOAD, F.lit("not a JSON object"))
    errors = [F.when(strict.isNull(), not_object)]  # no text ("" or a missing object)
    values, leaves, too_big = [], [], []  # leaves: the properties read with a type of their own
    for key, node in shape.properties.items():
        where = f"{path}.{key}" if path else key
        present = strict[key].isNotNull()
        if key in shape.required:
            errors.append(F.when(~present, _error(where, F.lit("required, missing"))))
        if node.type == "object":
            inner = _object(strict[key], node, where, reads, depth + 1)
            errors += [F.when(present, e) for e in inner.errors]
            values.append(F.when(present, inner.value).alias(column_name(key)))
            continue
        value = strict[key]
        if node.format == "decimal":
            value, error = _decimal(value, node, where)
            errors.append(error)
            too_big.append(_too_big(read[key], node))
        values.append(value.alias(column_name(key)))
        errors += _bound_errors(value, node, where)
        leaves.append((key, where, node))
    # Which property a refused record got wrong, in a column of the read's projection, so
    # the projections above it hold no parse and Spark compiles them into one stage. Its
    # condition repeats the read: Spark's subexpression elimination (on in every session,
    # ``shardlog.spark.session.JOB_CONF``) computes it once for both.
    suspect = F.coalesce(*(F.when(c, F.lit(True)) for c in too_big), read[_UNPARSED].isNotNull())
    errors.insert(1, reads.add(depth, F.when(suspect, _refusal(text, not_object, leaves))))
    return _Level(F.struct(*values), errors)


def _refusal(
    text: Column, not_object: Column, properties: list[tuple[str, str, JsonField]]
) -> Column:
    """A refused record's error: not a JSON object, or its first property (in declaration
    order) present in the text (its map of properties) and not read alone with its type."""
    from pyspark.sql import functions as F

    raw = F.from_json(text, "map<string,string>")
    wrong = [
        F.when(
            raw[key].isNotNull()
            & F.from_json(text, f"struct<`{key}`:{_read_type(node)}>")[key].isNull(),
            _error(where, F.lit(f"not {_kind(node)}")),
        )
        for key, where, node in properties
    ]
    return F.when(raw.isNull(), not_object).otherwise(F.coalesce(*wrong, F.lit(None)))


def _decimal(wide: Column, node: JsonField, where: str) -> tuple[Column, Column]:
    """A decimal property read at ``_EXACT``: its value (null unless it fits the declared
    precision and scale: never rounded) and the error of one with more places than the
    scale, named by its digits (one too big for the precision is refused as not of its
    type, ``_too_big``)."""
    from pyspark.sql import functions as F

    assert node.scale is not None
    rounded = F.round(wide, node.scale) != wide
    digits = F.regexp_replace(wide.cast("string"), r"\.?0+$", "")
    reason = F.concat(digits, F.lit(f" has more than {node.scale} decimal places"))
    return F.when(~rounded & ~_too_big(wide, node), wide), F.when(rounded, _error(where, reason))


def _too_big(wide: Column, node: JsonField) -> Column:
    """Whether a decimal read at ``_EXACT`` has more integer digits than its precision
    leaves."""
    from pyspark.sql import functions as F

    assert node.precision is not None and node.scale is not None
    return F.abs(wide) >= F.lit(10 ** (node.precision - node.scale)).cast(_EXACT)


def _bound_errors(value: Column, node: JsonField, where: str) -> list[Column]:
    """A typed value outside its bounds."""
    from pyspark.sql import functions as F

    errors = []
    if node.minimum is not None:
        reason = F.concat(value.cast("string"), F.lit(f" is below the minimum {node.minimum}"))
        errors.append(F.when(value < F.lit(node.minimum), _error(where, reason)))
    if node.maximum is not None:
        reason = F.concat(value.cast("string"), F.lit(f" is above the maximum {node.maximum}"))
        errors.append(F.when(value > F.lit(node.maximum), _error(where, reason)))
    return errors


def _error(field: str, reason: Column) -> Column:
    from pyspark.sql import functions as F

    return F.struct(F.lit(field).alias("field"), reason.alias("reason"))


def _level_type(shape: JsonField) -> str:
    """The Spark type one object level is read as: its nested objects as their JSON text
    (each object level reads its own), its decimals at ``_EXACT`` (checked, then cast), and
    ``_UNPARSED``: the text of a record the read refused (a property not of its type, or
    not a JSON object), null for one it took whole."""
    props = [f"`{k}`:{_level_read_type(p)}" for k, p in shape.properties.items()]
    return f"struct<{','.join([*props, f'{_UNPARSED}:string'])}>"


def _level_read_type(node: JsonField) -> str:
    if node.type == "object":
        return "string"
    if node.format == "decimal":
        return _EXACT
    return _read_type(node)


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
