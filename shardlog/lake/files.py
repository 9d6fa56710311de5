"""The lake table's data files: their names, and writing them with plain pyarrow + boto3.

A data file holds records of one log partition and one arrival day (the table's partition),
sorted by seq, and is named after what it holds and the run that wrote it::

    <table location>/data/arrival_day=YYYY-MM-DD/<partition>-<first seq>-<last seq>-<run>.parquet

The run id makes every name new: a file is written once and never overwritten, so a file a
committed snapshot references can never change under it, and the files of a run that lost
a race or crashed are told apart (and removed) without touching a committed one.
A file's columns are the table's declared ones (``shardlog.lake.schema``), each filled from
a segment by its mapper (``EVENT_RECORDS``): a new column is its declaration plus its mapper.
The Spark job's executors call ``write_data_files`` themselves, a task per chunk of segments
(``shardlog.spark.io.ChunkWriter``).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardlog import constants as C
from shardlog.format import Segment
from shardlog.lake.exceptions import LakeSchemaError
from shardlog.lake.schema import EVENTS, Column, TableSchema
from shardlog.lake.settings import LakeSettings

DATA_DIR = "data/"


@dataclass(frozen=True)
class DataFile:
    key: str
    partition_id: str
    records: int
    bytes: int
    first_seq: int
    last_seq: int

    def stats(self) -> dict[str, Any]:
        """The file as the compaction's commit step takes it (``shardlog.spark.io``)."""
        return {
            "file_key": self.key,
            "partition_id": self.partition_id,
            "records": self.records,
            "bytes": self.bytes,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
        }


def data_file_key(
    prefix: str, partition_id: str, day: str, first_seq: int, last_seq: int, run_id: str
) -> str:
    """The key of a data file; ``prefix`` is the table location's key ending in '/'."""
    return (
        f"{prefix}{DATA_DIR}{EVENTS.partition.name}={day}/{partition_id}-{first_seq:0{C.SEQ_DIGITS}d}"
        f"-{last_seq:0{C.SEQ_DIGITS}d}-{run_id}.parquet"
    )


# How a segment fills a column: the values of its records, in order.
ColumnMapper = Callable[[Segment], Sequence[object]]


@dataclass(frozen=True)
class SegmentMapping:
    """A table's columns filled from a segment: one mapper per declared column, no more, so
    a declared column without a mapper fails at import, naming it."""

    schema: TableSchema
    mappers: Mapping[str, ColumnMapper]

    def __post_init__(self) -> None:
        declared, mapped = set(self.schema.names), set(self.mappers)
        problems = [f"column {n} has no mapper" for n in sorted(declared - mapped)]
        problems += [f"mapper {n} fills no declared column" for n in sorted(mapped - declared)]
        if problems:
            raise LakeSchemaError(f"segment mapping refused: {'; '.join(problems)}")

    def with_column(self, column: Column, mapper: ColumnMapper) -> SegmentMapping:
        """This mapping with one more column and its mapper (a copy)."""
        return SegmentMapping(
            self.schema.with_column(column), {**self.mappers, column.name: mapper}
        )

    def records(self, segment: Segment) -> pa.RecordBatch:
        """The records of one segment in the table's Arrow schema."""
        return pa.RecordBatch.from_arrays(
            [pa.array(self.mappers[c.name](segment), c.arrow_type) for c in self.schema.columns],
            schema=self.schema.arrow(),
        )


def _micros(ms: int) -> int:
    return ms * 1000


# The raw table: a log record's fields; ``committed_at`` is the segment's ``written_at_ms``,
# stamped by the writer just before its commit.
EVENT_RECORDS = SegmentMapping(
    EVENTS,
    {
        "partition_id": lambda s: [s.partition_id] * len(s.records),
        "seq": lambda s: [r.seq for r in s.records],
        "partition_key": lambda s: [r.partition_key for r in s.records],
        "data": lambda s: [r.data for r in s.records],
        "kinesis_sequence_number": lambda s: [r.kinesis_sequence_number for r in s.records],
        "arrival_time": lambda s: [_micros(r.arrival_ms) for r in s.records],
        "committed_at": lambda s: [_micros(s.written_at_ms)] * len(s.records),
        "record_id": lambda s: [r.record_id for r in s.records],
    },
)


def segment_records(segment: Segment, mapping: SegmentMapping = EVENT_RECORDS) -> pa.RecordBatch:
    """The records of one segment in the table's Arrow schema."""
    return mapping.records(segment)


def parquet_bytes(table: pa.Table, schema: TableSchema = EVENTS) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table.select(list(schema.names)).cast(schema.arrow()), sink, compression="zstd")
    return sink.getvalue()


def arrival_day(arrival_time: datetime) -> str:
    return arrival_time.astimezone(UTC).strftime("%Y-%m-%d")


def write_data_files(
    s3: object,
    settings: LakeSettings,
    segments: Iterable[Segment],
    run_id: str,
    mapping: SegmentMapping = EVENT_RECORDS,
) -> list[DataFile]:
    """Write segments' records as data files, one per (partition, arrival day), with one
    PutObject each (in a compaction task, and in tests)."""
    batches = [mapping.records(s) for s in segments]
    if not batches:
        return []
    return write_rows(s3, settings, pa.Table.from_batches(batches), run_id, mapping.schema)


def write_rows(
    s3: object, settings: LakeSettings, rows: pa.Table, run_id: str, schema: TableSchema = EVENTS
) -> list[DataFile]:
    """Write a table's rows as data files, one per (partition, arrival day), sorted by seq,
    with one PutObject each (the raw table's, and a typed table's and its dead-letter
    table's: ``shardlog.spark.typed``)."""
    if not rows.num_rows:
        return []
    records = rows.sort_by([("partition_id", "ascending"), ("seq", "ascending")])
    days = pc.strftime(records.column("arrival_time"), format="%Y-%m-%d", locale="C")
    records = records.append_column("day", days)
    written = []
    for partition_id, day in sorted(
        set(zip(records.column("partition_id").to_pylist(), days.to_pylist(), strict=True))
    ):
        mask = pc.and_(
            pc.equal(records.column("partition_id"), partition_id),
            pc.equal(records.column("day"), day),
        )
        part = records.filter(mask)
        seqs = part.column("seq")
        first, last = pc.min(seqs).as_py(), pc.max(seqs).as_py()
        key = data_file_key(settings.key_prefix, partition_id, day, first, last, run_id)
        body = parquet_bytes(part, schema)
        s3.put_object(Bucket=settings.bucket, Key=key, Body=body)  # type: ignore[attr-defined]
        written.append(DataFile(key, partition_id, part.num_rows, len(body), first, last))
    return written


def s3_uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"
