"""Reading the lake table: filtered scans through pyiceberg, and the *fresh* read that adds
the committed log beyond the table's watermarks.

A scan reads one snapshot: the rows of every append up to it, never a file of a run that
crashed or lost a race (those are in no manifest). A fresh read takes that snapshot's
watermarks and reads each partition's committed segments from its watermark up to the head
(``SegmentStore``, the log's own reader), so it holds every record committed to the log
when it ran, each once: below the watermark from the table, at or above it from the log.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.lake.commit import table_watermarks
from shardlog.lake.exceptions import LakeSchemaError
from shardlog.lake.files import EVENT_RECORDS, SegmentMapping
from shardlog.lake.schema import EVENTS, UTC_MICROS, Column, TableSchema
from shardlog.segments import SegmentStore
from shardlog.tables import PartitionInfo

if TYPE_CHECKING:  # pragma: no cover
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Table

MAX_QUERY_LIMIT = C.LAKE_QUERY_MAX_LIMIT
DEFAULT_QUERY_LIMIT = C.LAKE_QUERY_DEFAULT_LIMIT
MAX_FILTER_VALUES = C.LAKE_QUERY_MAX_FILTER_VALUES


@dataclass(frozen=True)
class LakeQuery:
    """Rows matching every given filter (a filter of several values matches any of them);
    ``since`` is inclusive, ``until`` exclusive, both on ``arrival_time``."""

    partition_keys: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()
    since: datetime | None = None
    until: datetime | None = None
    limit: int = DEFAULT_QUERY_LIMIT
    # Column = value terms on other columns (a typed table's), values typed by ``where``.
    equals: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_QUERY_LIMIT:
            raise ValueError(f"limit must be 1..{MAX_QUERY_LIMIT}, not {self.limit}")
        for name, values in (
            ("partition key", self.partition_keys),
            ("partition", self.partitions),
        ):
            if len(values) > MAX_FILTER_VALUES:
                raise ValueError(
                    f"{name} filter: at most {MAX_FILTER_VALUES} values, not {len(values)}"
                )
        for name, when in (("since", self.since), ("until", self.until)):
            if when is not None and when.tzinfo is None:
                raise ValueError(f"{name} must carry a time zone (e.g. Z), not {when.isoformat()}")
        if self.since is not None and self.until is not None and self.since >= self.until:
            raise ValueError(
                f"since ({self.since.isoformat()}) must be before until ({self.until.isoformat()})"
            )


def row_filter(query: LakeQuery) -> BooleanExpression:
    """The query as a pyiceberg expression (pushed down to manifests and row groups)."""
    from pyiceberg.expressions import (
        AlwaysTrue,
        And,
        EqualTo,
        GreaterThanOrEqual,
        In,
        LessThan,
        Reference,
    )
    from pyiceberg.expressions.literals import literal

    terms: list[BooleanExpression] = []
    if query.partition_keys:
        terms.append(
            In(term=Reference("partition_key"), values={literal(k) for k in query.partition_keys})
        )
    if query.partitions:
        terms.append(
            In(term=Reference("partition_id"), values={literal(p) for p in query.partitions})
        )
    if query.since is not None:
        terms.append(
            GreaterThanOrEqual(term=Reference("arrival_time"), value=literal(_iso(query.since)))
        )
    if query.until is not None:
        terms.append(LessThan(term=Reference("arrival_time"), value=literal(_iso(query.until))))
    terms += [EqualTo(term=Reference(name), value=literal(value)) for name, value in query.equals]
    expression: BooleanExpression = AlwaysTrue()
    for term in terms:
        expression = And(expression, term)
    return expression


def where(schema: TableSchema, terms: Sequence[str]) -> tuple[tuple[str, Any], ...]:
    """``COLUMN=VALUE`` terms on a table's scalar columns, each value read as its column's
    type (``ValueError`` naming the term and why)."""
    parsed = []
    for term in terms:
        name, sep, text = term.partition("=")
        if not sep:
            raise ValueError(f"--where {term!r}: COLUMN=VALUE")
        try:
            column = schema.column(name)
        except LakeSchemaError as exc:
            raise ValueError(f"--where {term!r}: {exc}") from None
        read = _READERS.get(type(column.kind))
        if read is None:
            raise ValueError(f"--where {term!r}: {name} is {column.kind}, not a scalar column")
        try:
            value = read(text)
            if isinstance(column.kind, DecimalType):  # pyiceberg binds a decimal of its scale
                value = value.quantize(Decimal(1).scaleb(-column.kind.scale))
            parsed.append((name, value))
        except (ValueError, ArithmeticError) as exc:
            raise ValueError(f"--where {term!r}: not a {column.kind}: {exc}") from None
    return tuple(parsed)


def _boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise ValueError("true or false")
    return text == "true"


_READERS: dict[type, Callable[[str], Any]] = {
    StringType: str,
    LongType: int,
    IntegerType: int,
    DoubleType: float,
    BooleanType: _boolean,
    DecimalType: Decimal,
    DateType: lambda text: date.fromisoformat(text).isoformat(),
    TimestamptzType: lambda text: _iso(datetime.fromisoformat(text)),
}


def arrow_filter(rows: pa.Table, query: LakeQuery) -> pa.Table:
    """The same filter on Arrow rows (the fresh part, read from the log)."""
    mask = pa.array([True] * rows.num_rows, pa.bool_())
    if query.partition_keys:
        mask = pc.and_(mask, pc.is_in(rows["partition_key"], pa.array(query.partition_keys)))
    if query.partitions:
        mask = pc.and_(mask, pc.is_in(rows["partition_id"], pa.array(query.partitions)))
    if query.since is not None:
        mask = pc.and_(mask, pc.greater_equal(rows["arrival_time"], _scalar(query.since)))
    if query.until is not None:
        mask = pc.and_(mask, pc.less(rows["arrival_time"], _scalar(query.until)))
    return rows.filter(mask)


def query_table(table: Table, query: LakeQuery, schema: TableSchema = EVENTS) -> pa.Table:
    """The matching rows of the table's current snapshot, by (partition, seq), at most
    ``limit``: the declared columns, in the declared Arrow schema."""
    rows = table.scan(row_filter=row_filter(query), selected_fields=schema.names).to_arrow()
    return _ordered(rows.cast(schema.arrow()), query.limit)


def fresh_rows(
    clients: Clients,
    bucket: str,
    partitions: Sequence[PartitionInfo],
    watermarks: dict[str, int],
    query: LakeQuery,
    mapping: SegmentMapping = EVENT_RECORDS,
) -> pa.Table:
    """The matching committed records of the log at or beyond the table's watermarks."""
    store = SegmentStore(clients, bucket)
    wanted = set(query.partitions)
    batches = []
    for partition in partitions:
        start = watermarks.get(partition.partition_id, 0)
        if (wanted and partition.partition_id not in wanted) or start >= partition.next_seq:
            continue
        for segment in store.segments(partition.partition_id, start, partition.next_seq):
            batch = pa.Table.from_batches([mapping.records(segment)])
            batches.append(batch.filter(pc.greater_equal(batch["seq"], start)))
    if not batches:
        return mapping.schema.arrow().empty_table()
    return arrow_filter(pa.concat_tables(batches), query)


def run_query(
    table: Table,
    query: LakeQuery,
    *,
    fresh: bool = False,
    clients: Clients | None = None,
    bucket: str = "",
    partitions: Sequence[PartitionInfo] = (),
    mapping: SegmentMapping = EVENT_RECORDS,
) -> pa.Table:
    """The table's matching rows; with ``fresh``, and the log's beyond its watermarks."""
    rows = query_table(table, query, mapping.schema)
    if not fresh:
        return rows
    assert clients is not None, "a fresh query reads the log: give clients"
    marks = table_watermarks(table)
    recent = fresh_rows(clients, bucket, partitions, marks, query, mapping)
    return _ordered(pa.concat_tables([rows, recent.cast(mapping.schema.arrow())]), query.limit)


def json_rows(rows: pa.Table, schema: TableSchema = EVENTS) -> Iterator[dict[str, Any]]:
    """Rows in the vocabulary of ``shardlog read --json``: each declared column under its
    camelCase name, binary in base64, times in UTC to the millisecond."""
    convert = [(c.name, c.json_name, _json_value(c)) for c in schema.columns]
    for row in rows.to_pylist():
        yield {key: value(row[name]) for name, key, value in convert}


def _json_value(column: Column) -> Callable[[Any], Any]:
    """How a column's values appear in JSON (null stays null)."""
    if isinstance(column.kind, BinaryType):
        return lambda raw: None if raw is None else base64.b64encode(raw).decode("ascii")
    if isinstance(column.kind, TimestamptzType):
        return lambda when: None if when is None else _iso_ms(when)
    if isinstance(column.kind, (TimestampType, DateType)):
        return lambda when: None if when is None else when.isoformat()
    if isinstance(column.kind, DecimalType):  # exact, as text (a JSON number is a double)
        return lambda value: None if value is None else str(value)
    return lambda value: value


RAW_COLUMNS = ("partitionId", "seq", "partitionKey", "arrivalTime", "data")


def render_rows(rows: list[dict[str, Any]], columns: Sequence[str] = RAW_COLUMNS) -> str:
    """JSON rows (``json_rows``) as a text table, data as text when printable."""
    cells = [[str(r[c]) if c != "data" else _short(r[c]) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    lines.append(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
    return "\n".join(line.rstrip() for line in lines)


def _short(data_b64: str, width: int = 40) -> str:
    """The data as text when it is printable UTF-8, else its base64; cut at ``width``."""
    if not isinstance(data_b64, str):  # a SQL result's own `data` column (lake sql)
        data_b64 = "" if data_b64 is None else str(data_b64)
    try:
        text = base64.b64decode(data_b64, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        text = data_b64
    if not text.isprintable():
        text = data_b64
    return text if len(text) <= width else text[: width - 3] + "..."


def _ordered(rows: pa.Table, limit: int) -> pa.Table:
    ordered = rows.sort_by([("partition_id", "ascending"), ("seq", "ascending")])
    return ordered.slice(0, limit)


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="microseconds")


def _iso_ms(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _scalar(when: datetime) -> pa.Scalar:
    return pa.scalar(when.astimezone(UTC), UTC_MICROS)
