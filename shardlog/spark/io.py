"""Executor-side I/O of the Spark jobs, with no JAR: boto3 for S3, pyarrow for Parquet.

pip's pyspark has no s3a connector and Maven is out of reach, so Spark's own readers and
writers cannot touch S3 here; on EMR they could (EMRFS), but then local and EMR runs would
take different code paths. Instead the data moves through ``mapInArrow`` functions that run
in the executors and talk to S3 with boto3, exactly like the rest of shardlog:

- ``SegmentReader``: a task per committed segment: fetch and decode it through the one
  ``SegmentStore``, check it is the segment the driver planned (density), emit Arrow
  record batches;
- ``FileWriter``: rows arrive grouped by ``file_key`` and sorted by seq; each group becomes
  one data file of the lake table, written with a single PutObject at a key no other run
  uses (``shardlog.lake.files``); the driver then commits the files (``shardlog.lake.commit``);
- ``FileReader``: a task per Parquet object: GetObject, ``pyarrow.parquet.read_table``.

The functions are picklable objects holding only a ``ShardlogConfig`` (names, region,
endpoint), so each executor builds its own clients from its own credentials.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardlog.config import ShardlogConfig
from shardlog.format import Segment
from shardlog.lake.files import parquet_bytes, segment_records
from shardlog.lake.schema import ARROW_SCHEMA, COLUMNS
from shardlog.segments import SegmentStore, check_segment

# One record of the log, as the jobs see it: the lake table's columns (shardlog.lake.schema).
RECORD_COLUMNS = COLUMNS
RECORD_SCHEMA = (
    "partition_id string, seq long, partition_key string, data binary, "
    "kinesis_sequence_number string, arrival_time timestamp, committed_at timestamp, "
    "record_id string"
)
ARROW_RECORD_SCHEMA = ARROW_SCHEMA
SEGMENT_TASK_SCHEMA = "partition_id string, first_seq long, next_seq long"
FILE_TASK_SCHEMA = "key string"
FILE_STATS_SCHEMA = (
    "file_key string, partition_id string, records long, bytes long, first_seq long, last_seq long"
)
_ARROW_FILE_STATS = pa.schema(
    [
        ("file_key", pa.string()),
        ("partition_id", pa.string()),
        ("records", pa.int64()),
        ("bytes", pa.int64()),
        ("first_seq", pa.int64()),
        ("last_seq", pa.int64()),
    ]
)


def segment_batch(segment: Segment) -> pa.RecordBatch:
    """The records of one segment as an Arrow batch of the table's schema."""
    return segment_records(segment)


@dataclass(frozen=True)
class SegmentReader:
    config: ShardlogConfig

    def __call__(self, tasks: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        store = SegmentStore(self.config.clients(), self.config.bucket)
        for batch in tasks:
            for task in batch.to_pylist():
                partition_id, first_seq = task["partition_id"], task["first_seq"]
                segment = store.fetch(partition_id, first_seq)
                check_segment(segment, partition_id, first_seq, task["next_seq"])
                yield segment_batch(segment)


@dataclass(frozen=True)
class FileWriter:
    """Writes each ``file_key`` group of a Spark partition to its own Parquet object."""

    config: ShardlogConfig

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        received = [b for b in batches if b.num_rows]
        if not received:
            return
        table = pa.Table.from_batches(received)
        s3 = self.config.clients().s3
        keys = table.column("file_key").to_pylist()
        start = 0
        stats: list[dict[str, object]] = []
        for file_key, group in itertools.groupby(keys):
            length = sum(1 for _ in group)
            rows = table.slice(start, length)
            start += length
            body = parquet_bytes(rows.select(list(RECORD_COLUMNS)))
            s3.put_object(Bucket=self.config.bucket, Key=file_key, Body=body)
            seqs = rows.column("seq")
            stats.append(
                {
                    "file_key": file_key,
                    "partition_id": rows.column("partition_id")[0].as_py(),
                    "records": length,
                    "bytes": len(body),
                    "first_seq": pc.min(seqs).as_py(),
                    "last_seq": pc.max(seqs).as_py(),
                }
            )
        yield pa.RecordBatch.from_pylist(stats, schema=_ARROW_FILE_STATS)


@dataclass(frozen=True)
class FileReader:
    """Reads compacted Parquet objects back as record batches of ``ARROW_RECORD_SCHEMA``."""

    config: ShardlogConfig

    def __call__(self, tasks: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        s3 = self.config.clients().s3
        for batch in tasks:
            for task in batch.to_pylist():
                body = s3.get_object(Bucket=self.config.bucket, Key=task["key"])["Body"].read()
                table = read_parquet(body)
                yield from table.to_batches()


def read_parquet(body: bytes) -> pa.Table:
    """A compacted file's records, in the record schema (date and hour live in the key)."""
    table = pq.read_table(pa.BufferReader(body), partitioning=None)
    return table.select(list(RECORD_COLUMNS)).cast(ARROW_RECORD_SCHEMA)


def put_table(s3: Any, bucket: str, key: str, table: pa.Table) -> int:
    """Write a small table from the driver (analytics results); returns its size."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    body = sink.getvalue()
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    return len(body)
