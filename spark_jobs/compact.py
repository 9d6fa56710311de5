"""Compaction: the committed log, from the compaction watermark up to the head, into Parquet.

The exactly-once protocol (plan, begin, write, commit) lives in ``shardlog.spark.compaction``;
this job is ``main(argv)``, the pure DataFrame transforms that name the files, and the wiring.
Files: ``compacted/date=D/hour=H/<partition>-<first seq>-<last seq>.parquet``.
Run: ``spark-submit spark_jobs/compact.py --bucket B --partitions-table P --consumers-table C``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from shardlog import constants as C
from shardlog.aws import Clients
from shardlog.spark.compaction import (
    BatchPlan,
    CompactionReport,
    begin_batches,
    check_files,
    commit_batches,
    mark_finished,
    plan_batches,
    read_segments,
    summarize,
    write_files,
)
from shardlog.spark.jobs import JobArgs
from shardlog.spark.session import build_session
from shardlog.spark.watermark import WatermarkStore

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


# --- wiring ------------------------------------------------------------------------------
def write_batches(
    spark: SparkSession, args: JobArgs, plans: Sequence[BatchPlan]
) -> list[dict[str, Any]]:
    """Step 3: the batches' records, one Parquet object per (partition, date, hour)."""
    if not plans:
        return []
    slices = max(1, spark.sparkContext.defaultParallelism)
    # One shuffle: the file-key window is partitioned by these very columns, so Spark reuses
    # this partitioning for it, and each file's rows end up in a single task.
    grouped = with_time_partitions(read_segments(spark, args, plans)).repartition(
        slices, "partition_id", "date", "hour"
    )
    return write_files(with_file_keys(grouped), args)


def compact(spark: SparkSession, args: JobArgs, clients: Clients | None = None) -> CompactionReport:
    clients = clients or args.config().clients()
    store = WatermarkStore(clients, args.consumers_table)
    report = CompactionReport()
    with report.phase("plan"):
        plans, finished = plan_batches(clients, args)
        mark_finished(store, finished, report)
    with report.phase("begin"):
        begun = begin_batches(store, plans, report)
    with report.phase("write"):  # the executors: fetch, decode, group, Parquet, PUT
        files = write_batches(spark, args, begun)
    with report.phase("check"):
        check_files(begun, files)
    with report.phase("commit"):
        commit_batches(store, begun, report)
    return summarize(report, begun, files)


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
