"""The lake table's data files: their names, and writing them with plain pyarrow + boto3.

A data file holds records of one log partition and one arrival day (the table's partition),
sorted by seq, and is named after what it holds and the run that wrote it::

    <table location>/data/arrival_day=YYYY-MM-DD/<partition>-<first seq>-<last seq>-<run>.parquet

The run id makes every name new: a file is written once and never overwritten, so a file a
committed snapshot references can never change under it, and the files of a run that lost
a race or crashed are told apart (and removed) without touching a committed one.
The Spark job's executors call ``write_data_files`` themselves, a task per chunk of segments
(``shardlog.spark.io.ChunkWriter``).
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardlog import constants as C
from shardlog.format import Segment
from shardlog.lake.schema import ARROW_SCHEMA, COLUMNS, PARTITION_FIELD, UTC_MICROS
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
        f"{prefix}{DATA_DIR}{PARTITION_FIELD}={day}/{partition_id}-{first_seq:0{C.SEQ_DIGITS}d}"
        f"-{last_seq:0{C.SEQ_DIGITS}d}-{run_id}.parquet"
    )


def segment_records(segment: Segment) -> pa.RecordBatch:
    """The records of one segment in the table's Arrow schema; ``committed_at`` is the
    segment's ``written_at_ms``, stamped by the writer just before its commit."""
    records = segment.records
    count = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([segment.partition_id] * count, pa.string()),
            pa.array([r.seq for r in records], pa.int64()),
            pa.array([r.partition_key for r in records], pa.string()),
            pa.array([r.data for r in records], pa.binary()),
            pa.array([r.kinesis_sequence_number for r in records], pa.string()),
            pa.array([r.arrival_ms * 1000 for r in records], UTC_MICROS),
            pa.array([segment.written_at_ms * 1000] * count, UTC_MICROS),
            pa.array([r.record_id for r in records], pa.string()),
        ],
        schema=ARROW_SCHEMA,
    )


def parquet_bytes(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table.select(list(COLUMNS)).cast(ARROW_SCHEMA), sink, compression="zstd")
    return sink.getvalue()


def arrival_day(arrival_time: datetime) -> str:
    return arrival_time.astimezone(UTC).strftime("%Y-%m-%d")


def write_data_files(
    s3: object, settings: LakeSettings, segments: Iterable[Segment], run_id: str
) -> list[DataFile]:
    """Write segments' records as data files, one per (partition, arrival day), with one
    PutObject each (in a compaction task, and in tests)."""
    batches = [segment_records(s) for s in segments]
    if not batches:
        return []
    records = pa.Table.from_batches(batches).sort_by(
        [("partition_id", "ascending"), ("seq", "ascending")]
    )
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
        rows = records.filter(mask)
        seqs = rows.column("seq")
        first, last = pc.min(seqs).as_py(), pc.max(seqs).as_py()
        key = data_file_key(settings.key_prefix, partition_id, day, first, last, run_id)
        body = parquet_bytes(rows)
        s3.put_object(Bucket=settings.bucket, Key=key, Body=body)  # type: ignore[attr-defined]
        written.append(DataFile(key, partition_id, rows.num_rows, len(body), first, last))
    return written


def s3_uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"
