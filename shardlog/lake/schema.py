"""The lake table's shape: columns, partitioning, sort order, and its Arrow twin.

One row per committed log record. ``(partition_id, seq)`` identifies it (Iceberg identifier
fields); ``committed_at`` is the segment's ``written_at_ms`` (docs/SPARK.md, ingest delay).

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

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import (
    BinaryType,
    IcebergType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

from shardlog.lake.exceptions import LakeSchemaError

_COLUMNS: tuple[tuple[int, str, IcebergType, bool, str], ...] = (
    (1, "partition_id", StringType(), True, "the log partition (Kinesis shard id)"),
    (2, "seq", LongType(), True, "position in the partition: 0, 1, 2, ... dense"),
    (3, "partition_key", StringType(), True, "the Kinesis partition key"),
    (4, "data", BinaryType(), True, "the record's bytes"),
    (5, "kinesis_sequence_number", StringType(), True, "up to 128 digits: compare as numbers"),
    (6, "arrival_time", TimestamptzType(), True, "Kinesis approximate arrival time"),
    (7, "committed_at", TimestamptzType(), True, "when the writer committed its segment"),
    (8, "record_id", StringType(), False, "the producer's id of an idempotent produce"),
)
COLUMNS = tuple(name for _, name, *_ in _COLUMNS)
PARTITION_FIELD = "arrival_day"

SCHEMA = Schema(
    *(
        NestedField(field_id, name, kind, required=required, doc=doc)
        for field_id, name, kind, required, doc in _COLUMNS
    ),
    identifier_field_ids=[1, 2],
)
PARTITION_SPEC = PartitionSpec(
    PartitionField(source_id=6, field_id=1000, transform=DayTransform(), name=PARTITION_FIELD)
)
SORT_ORDER = SortOrder(
    SortField(source_id=1, transform=IdentityTransform()),
    SortField(source_id=2, transform=IdentityTransform()),
)

UTC_MICROS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema(
    [
        pa.field("partition_id", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("partition_key", pa.string(), nullable=False),
        pa.field("data", pa.binary(), nullable=False),
        pa.field("kinesis_sequence_number", pa.string(), nullable=False),
        pa.field("arrival_time", UTC_MICROS, nullable=False),
        pa.field("committed_at", UTC_MICROS, nullable=False),
        pa.field("record_id", pa.string(), nullable=True),
    ]
)


def check_schema(found: Schema, identifier: str) -> None:
    """Refuse a table whose columns are not shardlog's (name, type, required), by name."""
    expected = {f.name: f for f in SCHEMA.fields}
    actual = {f.name: f for f in found.fields}
    problems = []
    for name, want in expected.items():
        have = actual.get(name)
        if have is None:
            problems.append(f"missing column {name}")
        elif have.field_type != want.field_type or have.required != want.required:
            problems.append(
                f"column {name} is {have.field_type}{' required' if have.required else ''}, "
                f"expected {want.field_type}{' required' if want.required else ''}"
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
