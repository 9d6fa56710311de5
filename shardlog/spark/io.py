"""Executor-side I/O of the Spark jobs, with no JAR: boto3 for S3, pyarrow for Parquet.

pip's pyspark has no s3a connector and Maven is out of reach, so Spark's own readers and
writers cannot touch S3 here; on EMR they could (EMRFS), but then local and EMR runs would
take different code paths. Instead the data moves through ``mapInArrow`` functions that run
in the executors and talk to S3 with boto3, exactly like the rest of shardlog:

- ``ChunkWriter``: a task per chunk of consecutive segments of one partition: fetch and
  decode them through the one ``SegmentStore``, check each is the segment the driver
  planned (density), write the records as lake data files (one per arrival day, a single
  PutObject each, at keys no other run uses: ``shardlog.lake.files``) and emit only the
  files' stats; the driver then commits the files (``shardlog.lake.commit``). No shuffle:
  the records never pass through the JVM;
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
import pyarrow.parquet as pq

from shardlog.config import ShardlogConfig
from shardlog.lake.files import write_data_files
from shardlog.lake.schema import EVENTS
from shardlog.lake.settings import LakeSettings
from shardlog.segments import SegmentStore, check_segment

# One record of the log, as the jobs see it: the lake table's columns (shardlog.lake.schema).
RECORD_SCHEMA = EVENTS.spark_ddl()
# A chunk: consecutive segments of one partition, by their boundaries [b0, b1, ..., bn].
CHUNK_TASK_SCHEMA = "partition_id string, bounds array<long>"
FILE_TASK_SCHEMA = "key string"
FILE_STATS_SCHEMA = (
    "file_key string, partition_id string, records long, bytes long, first_seq long, last_seq long"
)
ARROW_FILE_STATS = pa.schema(
    [
        ("file_key", pa.string()),
        ("partition_id", pa.string()),
        ("records", pa.int64()),
        ("bytes", pa.int64()),
        ("first_seq", pa.int64()),
        ("last_seq", pa.int64()),
    ]
)


@dataclass(frozen=True)
class ChunkWriter:
    """A task per chunk (consecutive committed segments of one partition): fetch and decode
    each segment through the one ``SegmentStore``, check it is the segment the driver
    planned (density), and write the chunk's records as data files of the lake table, one
    per arrival day, with one PutObject each (``shardlog.lake.files.write_data_files``).
    Emits one stats row per file; the records themselves never enter the JVM."""

    config: ShardlogConfig
    lake: LakeSettings
    run_id: str

    def __call__(self, tasks: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        clients = self.config.clients()
        store = SegmentStore(clients, self.config.bucket)
        for batch in tasks:
            for task in batch.to_pylist():
                partition_id, bounds = task["partition_id"], task["bounds"]
                segments = []
                for first_seq, next_seq in itertools.pairwise(bounds):
                    segment = store.fetch(partition_id, first_seq)
                    check_segment(segment, partition_id, first_seq, next_seq)
                    segments.append(segment)
                files = write_data_files(clients.s3, self.lake, segments, self.run_id)
                yield pa.RecordBatch.from_pylist(
                    [f.stats() for f in files], schema=ARROW_FILE_STATS
                )


@dataclass(frozen=True)
class FileReader:
    """Reads compacted Parquet objects back as record batches of the lake table's Arrow
    schema (``shardlog.lake.schema.EVENTS``)."""

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
    return table.select(list(EVENTS.names)).cast(EVENTS.arrow())


def put_table(s3: Any, bucket: str, key: str, table: pa.Table) -> int:
    """Write a small table from the driver (analytics results); returns its size."""
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    body = sink.getvalue()
    s3.put_object(Bucket=bucket, Key=key, Body=body)
    return len(body)
