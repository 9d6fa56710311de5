"""Compaction: the committed log, from the compaction watermark up to the head, into Parquet.

Per partition (a group of its own in the consumers table, ``$compaction``):

1. plan (driver): read the watermark and the head; list the committed segments from the
   watermark on and take whole segments up to ``--max-records``; a batch a crashed run
   left pending is taken again exactly as it was;
2. begin (driver): record the batch end as ``pendingCheckpoint`` (conditional write);
3. write (executors): read and decode the segments, add date and hour, group rows into
   files named ``compacted/date=D/hour=H/<partition>-<first seq>-<last seq>.parquet``
   and PUT each one: the same batch always gives the same names, so a retry overwrites;
4. commit (driver): check the files hold exactly the batch, then advance the watermark
   with a conditional write (``SHARD_END`` once an ENDED partition is done).

A crash anywhere before step 4 leaves the watermark where it was and the batch pending;
the next run redoes that very batch, overwriting the same objects: no duplicate, no gap.
Run: ``spark-submit spark_jobs/compact.py --bucket B --partitions-table P --consumers-table C``.
"""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.exceptions import CorruptLogError
from shardlog.format import partition_prefix, segment_key, seq_of_key
from shardlog.spark.exceptions import CompactionError, WatermarkConflictError
from shardlog.spark.io import (
    FILE_STATS_SCHEMA,
    RECORD_SCHEMA,
    SEGMENT_TASK_SCHEMA,
    FileWriter,
    SegmentReader,
)
from shardlog.spark.jobs import JobArgs
from shardlog.spark.session import build_session
from shardlog.spark.watermark import Watermark, WatermarkStore
from shardlog.tables import Tables

APP_NAME = "shardlog-compact"


# --- pure transforms ---------------------------------------------------------------------
def with_time_partitions(records: DataFrame) -> DataFrame:
    """Add ``date`` (yyyy-MM-dd) and ``hour`` (0-23) of the arrival time, in UTC."""
    return records.withColumn("date", F.date_format("arrival_time", "yyyy-MM-dd")).withColumn(
        "hour", F.hour("arrival_time")
    )


def with_file_keys(records: DataFrame, prefix: str = C.COMPACTED_PREFIX) -> DataFrame:
    """Add ``file_key``: one file per (partition, date, hour) of the batch, named by its
    partition and seq range, so the same batch always maps to the same objects."""
    group = Window.partitionBy("partition_id", "date", "hour")
    first = F.lpad(F.min("seq").over(group).cast("string"), C.SEQ_DIGITS, "0")
    last = F.lpad(F.max("seq").over(group).cast("string"), C.SEQ_DIGITS, "0")
    hour = F.lpad(F.col("hour").cast("string"), 2, "0")
    key = F.concat(
        F.lit(f"{prefix}date="),
        "date",
        F.lit("/hour="),
        hour,
        F.lit("/"),
        "partition_id",
        F.lit("-"),
        first,
        F.lit("-"),
        last,
        F.lit(".parquet"),
    )
    return records.withColumn("file_key", key)


# --- plan (driver) -----------------------------------------------------------------------
@dataclass(frozen=True)
class SegmentRef:
    partition_id: str
    key: str
    first_seq: int
    next_seq: int


@dataclass(frozen=True)
class BatchPlan:
    partition_id: str
    start: int
    end: int
    segments: tuple[SegmentRef, ...]
    watermark: Watermark
    ends_partition: bool = False  # the partition is ENDED and this batch reaches its head
    redo: bool = False  # a crashed run's pending batch, taken again as it was

    @property
    def records(self) -> int:
        return self.end - self.start


@dataclass
class CompactionReport:
    batches: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0
    files: int = 0
    bytes: int = 0
    ended: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def segment_starts(s3: Any, bucket: str, partition_id: str, start: int) -> Iterator[int]:
    """First seqs of the partition's segment objects from ``start`` on, in log order."""
    prefix = partition_prefix(partition_id)
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    if start > 0:
        kwargs["StartAfter"] = segment_key(partition_id, start - 1)
    for page in s3.get_paginator("list_objects_v2").paginate(**kwargs):
        for obj in page.get("Contents", []):
            yield seq_of_key(obj["Key"])


def batch_bounds(starts: Iterable[int], start: int, end: int, max_records: int) -> list[int]:
    """Segment boundaries of the batch from ``start``: whole segments, at most
    ``max_records`` records unless the first segment alone is larger, never past ``end``.

    Objects at or past ``end`` (the head) are uncommitted leftovers and are ignored; the
    first committed segment must start exactly at ``start``.
    """
    keys: list[int] = []
    past_limit = False
    for seq in starts:
        if seq >= end:
            break
        keys.append(seq)
        if seq - start >= max_records:
            past_limit = True
            break
    if not keys or keys[0] != start:
        found = keys[0] if keys else None
        raise CorruptLogError(
            f"no committed segment starts at seq {start} (first found: {found}), below head {end}"
        )
    bounds = keys if past_limit else [*keys, end]
    fitting = [b for b in bounds[1:] if b - start <= max_records]
    last = fitting[-1] if fitting else bounds[1]
    return bounds[: bounds.index(last) + 1]


def plan_batches(clients: Clients, args: JobArgs) -> tuple[list[BatchPlan], list[Watermark]]:
    """The batch of each partition with records to compact, and the ENDED partitions that
    are fully compacted but not yet marked ``SHARD_END``."""
    store = WatermarkStore(clients, args.consumers_table)
    plans: list[BatchPlan] = []
    finished: list[Watermark] = []
    partitions = Tables(clients, args.config().tables).list_partitions()
    for partition in partitions:
        mark = store.read(partition.partition_id)
        if mark.ended:
            continue
        redo = mark.pending_end is not None
        end = mark.pending_end if mark.pending_end is not None else partition.next_seq
        if mark.next_seq >= end:
            if partition.state == C.STATE_ENDED:
                finished.append(mark)
            continue
        limit = end - mark.next_seq if redo else args.max_records
        starts = segment_starts(clients.s3, args.bucket, partition.partition_id, mark.next_seq)
        bounds = batch_bounds(starts, mark.next_seq, end, limit)
        plans.append(
            BatchPlan(
                partition_id=partition.partition_id,
                start=bounds[0],
                end=bounds[-1],
                segments=tuple(
                    SegmentRef(partition.partition_id, segment_key(partition.partition_id, a), a, b)
                    for a, b in itertools.pairwise(bounds)
                ),
                watermark=mark,
                ends_partition=(
                    partition.state == C.STATE_ENDED and bounds[-1] == partition.next_seq
                ),
                redo=redo,
            )
        )
    return plans, finished


def begin_batches(
    store: WatermarkStore, plans: Sequence[BatchPlan], report: CompactionReport
) -> list[BatchPlan]:
    """Record each new batch as pending; a partition another run moved first is skipped."""
    begun = []
    for plan in plans:
        if plan.redo:
            begun.append(plan)
            continue
        try:
            mark = store.begin(plan.watermark, plan.end)
        except WatermarkConflictError as exc:
            report.conflicts.append(str(exc))
            continue
        begun.append(replace(plan, watermark=mark))
    return begun


# --- write (executors) -------------------------------------------------------------------
def read_segments(spark: SparkSession, args: JobArgs, plans: Sequence[BatchPlan]) -> DataFrame:
    """The batches' records, decoded by the executors (one task per segment)."""
    tasks = [(s.partition_id, s.key, s.first_seq, s.next_seq) for p in plans for s in p.segments]
    slices = max(1, min(len(tasks), spark.sparkContext.defaultParallelism * 4))
    task_df = spark.createDataFrame(
        spark.sparkContext.parallelize(tasks, slices), SEGMENT_TASK_SCHEMA
    )
    return task_df.mapInArrow(SegmentReader(args.config()), RECORD_SCHEMA)


def write_files(files: DataFrame, args: JobArgs) -> list[dict[str, Any]]:
    """PUT every ``file_key`` group as one Parquet object; the files' stats.

    Every row of a group must already sit in one Spark partition (``write_batches``
    partitions by the columns the file key is made of).
    """
    written = files.sortWithinPartitions("file_key", "seq").mapInArrow(
        FileWriter(args.config()), FILE_STATS_SCHEMA
    )
    return [row.asDict() for row in written.collect()]


def write_batches(
    spark: SparkSession, args: JobArgs, plans: Sequence[BatchPlan]
) -> list[dict[str, Any]]:
    if not plans:
        return []
    slices = max(1, spark.sparkContext.defaultParallelism)
    # One shuffle: the file-key window is partitioned by these very columns, so Spark reuses
    # this partitioning for it, and each file's rows end up in a single task.
    grouped = with_time_partitions(read_segments(spark, args, plans)).repartition(
        slices, "partition_id", "date", "hour"
    )
    return write_files(with_file_keys(grouped), args)


# --- commit (driver) ---------------------------------------------------------------------
def check_files(plans: Sequence[BatchPlan], files: Sequence[dict[str, Any]]) -> None:
    """Advance nothing unless each batch's files hold exactly its records."""
    for plan in plans:
        mine = [f for f in files if f["partition_id"] == plan.partition_id]
        count = sum(f["records"] for f in mine)
        low = min((f["first_seq"] for f in mine), default=None)
        high = max((f["last_seq"] for f in mine), default=None)
        if (count, low, high) != (plan.records, plan.start, plan.end - 1):
            raise CompactionError(
                f"{plan.partition_id}: batch [{plan.start}, {plan.end}) wrote {count} records "
                f"over seqs [{low}, {high}]; the watermark stays at {plan.start}"
            )


def commit_batches(
    store: WatermarkStore, plans: Sequence[BatchPlan], report: CompactionReport
) -> None:
    for plan in plans:
        try:
            store.advance(plan.watermark, ended=plan.ends_partition)
        except WatermarkConflictError as exc:
            # Another run committed this batch (it wrote the very same files): nothing lost.
            report.conflicts.append(str(exc))
            continue
        if plan.ends_partition:
            report.ended.append(plan.partition_id)


def compact(spark: SparkSession, args: JobArgs, clients: Clients | None = None) -> CompactionReport:
    clients = clients or args.config().clients()
    store = WatermarkStore(clients, args.consumers_table)
    report = CompactionReport()
    plans, finished = plan_batches(clients, args)
    for mark in finished:
        try:
            store.mark_ended(mark)
            report.ended.append(mark.partition_id)
        except WatermarkConflictError as exc:
            report.conflicts.append(str(exc))
    begun = begin_batches(store, plans, report)
    files = write_batches(spark, args, begun)
    check_files(begun, files)
    commit_batches(store, begun, report)
    report.batches = [
        {"partitionId": p.partition_id, "start": p.start, "end": p.end, "redo": p.redo}
        for p in begun
    ]
    report.records = sum(p.records for p in begun)
    report.files = len(files)
    report.bytes = sum(f["bytes"] for f in files)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    args = JobArgs.parse(sys.argv[1:] if argv is None else argv, (__doc__ or "").split("\n")[0])
    spark = build_session(APP_NAME)
    try:
        report = compact(spark, args)
    finally:
        spark.stop()
    print(json.dumps({"job": "compact", **report.as_dict()}, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
