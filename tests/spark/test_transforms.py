"""The jobs' pure DataFrame transforms, on the shared local session."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pyspark.testing import assertDataFrameEqual

from shardlog.exceptions import CorruptLogError
from shardlog.lake.schema import EVENTS
from shardlog.spark import aggregates as A
from shardlog.spark.compaction import batch_bounds
from shardlog.spark.io import RECORD_SCHEMA
from spark_jobs.analytics import (
    committed_rows,
    delay_histogram,
    delay_sketch,
    delay_totals,
    hourly_stats,
    key_stats,
    partition_stats,
    with_ingest_delay,
)

P0, P1 = "shardId-000000000000", "shardId-000000000001"


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def record(
    partition: str,
    seq: int,
    key: str = "k",
    data: bytes = b"xx",
    arrival: str = "2024-03-01T10:15:00",
    committed: str | None = None,
) -> tuple[Any, ...]:
    return (
        partition,
        seq,
        key,
        bytearray(data),
        str(49 * 10**54 + seq),
        ts(arrival),
        ts(committed or arrival),
        None,  # record_id
    )


@pytest.fixture
def records(spark: Any) -> Any:
    return spark.createDataFrame(
        [
            record(P0, 0, "a", arrival="2024-03-01T23:59:59"),
            record(P0, 1, "b", arrival="2024-03-02T00:00:00"),
            record(P0, 2, "a", arrival="2024-03-02T00:30:00"),
            record(P1, 0, "a", arrival="2024-03-01T23:10:00"),
        ],
        RECORD_SCHEMA,
    )


def test_the_jobs_record_schema_is_the_lake_tables_declared_one(spark: Any) -> None:
    """Spark's own parse of the derived DDL is the derived StructType, column for column."""
    assert spark.createDataFrame([], RECORD_SCHEMA).schema == EVENTS.spark_struct()


def test_committed_rows_stop_at_the_watermark(spark: Any, records: Any) -> None:
    marks = spark.createDataFrame([(P0, 2)], "partition_id string, committed_end long")
    actual = committed_rows(records, marks).select("partition_id", "seq")
    expected = spark.createDataFrame([(P0, 0), (P0, 1)], "partition_id string, seq long")
    assertDataFrameEqual(actual, expected)  # P1 has no watermark: nothing of it is committed


def test_shard_end_watermark_keeps_every_row(spark: Any, records: Any) -> None:
    marks = spark.createDataFrame([(P0, None), (P1, 0)], "partition_id string, committed_end long")
    actual = committed_rows(records, marks).select("partition_id", "seq")
    expected = spark.createDataFrame([(P0, 0), (P0, 1), (P0, 2)], "partition_id string, seq long")
    assertDataFrameEqual(actual, expected)


def test_hourly_and_key_stats(spark: Any, records: Any) -> None:
    assertDataFrameEqual(
        hourly_stats(records),
        spark.createDataFrame(
            [("2024-03-01", 23, 2, 4), ("2024-03-02", 0, 2, 4)],
            "date string, hour int, records long, bytes long",
        ),
    )
    assertDataFrameEqual(
        key_stats(records),
        spark.createDataFrame(
            [("a", 3, 6), ("b", 1, 2)], "partition_key string, records long, bytes long"
        ),
    )


def test_ingest_delay_and_its_distribution(spark: Any) -> None:
    rows = spark.createDataFrame(
        [
            record(P0, 0, arrival="2024-03-01T10:00:00", committed="2024-03-01T10:00:00.050"),
            record(P0, 1, arrival="2024-03-01T10:00:00", committed="2024-03-01T10:00:00.500"),
            record(P0, 2, arrival="2024-03-01T10:00:00", committed="2024-03-01T10:00:02"),
            record(P0, 3, arrival="2024-03-01T10:00:00", committed="2024-03-01T10:20:00"),
        ],
        RECORD_SCHEMA,
    )
    delays = with_ingest_delay(rows)
    assertDataFrameEqual(
        delays.select("seq", "delay_ms"),
        spark.createDataFrame(
            [(0, 50), (1, 500), (2, 2000), (3, 1_200_000)], "seq long, delay_ms long"
        ),
    )
    assertDataFrameEqual(
        delay_histogram(delays),
        spark.createDataFrame(
            [(100, 1), (1_000, 1), (10_000, 1), (None, 1)], "upper_ms long, records long"
        ),
        checkRowOrder=True,
    )
    (totals,) = [row.asDict() for row in delay_totals(delays).collect()]
    assert totals == {"count": 4, "sumMs": 1_202_550, "min": 50, "max": 1_200_000}
    sketch = [row.asDict() for row in delay_sketch(delays).collect()]
    # Spark's buckets are the pure function's (the driver merges and reads them).
    assert sorted((r["bucket"], r["records"]) for r in sketch) == sorted(
        (A.sketch_bucket(d), 1) for d in (50, 500, 2000, 1_200_000)
    )
    summary = A.delay_summary(totals, sketch)
    assert (summary["count"], summary["min"], summary["max"]) == (4, 50, 1_200_000)
    assert summary["p50"] == pytest.approx(500, rel=A.SKETCH_ALPHA)
    assert summary["p99"] == pytest.approx(1_200_000, rel=A.SKETCH_ALPHA)


def test_partition_stats_expose_duplicates_and_gaps(spark: Any) -> None:
    rows = spark.createDataFrame(
        [record(P0, 0), record(P0, 1), record(P0, 1), record(P1, 0), record(P1, 2)],
        RECORD_SCHEMA,
    )
    expected = spark.createDataFrame(
        [(P0, 3, 2, 0, 1), (P1, 2, 2, 0, 2)],
        "partition_id string, rows long, distinct_seqs long, min_seq long, max_seq long",
    )
    assertDataFrameEqual(partition_stats(rows), expected)


@pytest.mark.parametrize(
    ("starts", "start", "end", "limit", "bounds"),
    [
        ([0, 10, 20, 30], 0, 40, 100, [0, 10, 20, 30, 40]),  # everything up to the head
        ([0, 10, 20, 30], 0, 40, 25, [0, 10, 20]),  # whole segments within the limit
        ([0, 10, 20, 30], 0, 40, 5, [0, 10]),  # a segment larger than the limit goes whole
        ([10, 20, 30, 40], 10, 30, 100, [10, 20, 30]),  # leftovers at/after the head: ignored
        ([20, 30], 20, 50, 100, [20, 30, 50]),
    ],
)
def test_batch_bounds(
    starts: list[int], start: int, end: int, limit: int, bounds: list[int]
) -> None:
    assert batch_bounds(iter(starts), start, end, limit) == bounds


def test_batch_bounds_refuses_a_gap_at_the_watermark() -> None:
    with pytest.raises(CorruptLogError, match="no committed segment starts at seq 10"):
        batch_bounds(iter([20, 30]), 10, 40, 100)
